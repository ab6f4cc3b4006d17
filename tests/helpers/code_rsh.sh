#!/usr/bin/env bash
# A --rsh for test 92: "code_rsh.sh HOST WORDS..." runs nothing remote and exits at once with the code the
# host's name asks for: a host named c<N>-<i> (c3-0, c5-1, ...) exits N; s<N>-<i> dies of signal N.
host=${1%%-*}
case $host in
  c*) exit "${host#c}" ;;
  s*) kill -"${host#s}" $$ ;;
esac
exit 0
