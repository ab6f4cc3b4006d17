#!/usr/bin/env bash
# A --rsh for test 48: "code_rsh.sh HOST WORDS..." runs nothing remote; it reads its stdin (the launcher's
# pipe to the agent) until the end or a stop line, then exits with the code the host's name asks for: a host
# named c<N> (c3, c5, ...) exits N; s<N> dies of signal N.
host=$1
case $host in
  c*) exit "${host#c}" ;;
  s*) kill -"${host#s}" $$ ;;
esac
exit 0
