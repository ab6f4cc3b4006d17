"""Prints torchrun's own verdict on command lines that give its options awkward values (issue 38, item 3).

For every option of torch.distributed.run's parser that takes a value (this interpreter's torch), each
value of VALUES is given as "--opt VALUE", "--opt=VALUE" (and "-rVALUE" for short options) before a script,
and the option is given last with no value. Choices and types are dropped first so that only argparse's
reading of the command line decides. One line per case: "accept" or "refuse", then the argv items, all
separated by tabs. tests/unit/test_cli.c runs trun's parser on the same argv and compares."""
import sys

from torch.distributed.run import get_args_parser

VALUES = ["v", "", "-", "-1", "-1.5", "-.5", "-1e5", "-0x10", "-1 2", "--", "---", "--dry-run",
          "--nnodes", "--nnodes=2", "--nn", "--n", "--no", "--he", "--help", "-h", "-m", "-mr3", "-r",
          "-r3", "-r 3", "-t=1", "-x", "-x=1", "-x y", "--x y", "--role=a b", "--bogus", "-.", "-1."]


class Refused(Exception):
    pass


def verdict(parser, argv):
    try:
        parser.parse_args(argv)
        return "accept"
    except Refused:
        return "refuse"


def main():
    parser = get_args_parser()

    def error(message):
        raise Refused(message)

    parser.error = error
    for action in parser._actions:
        action.choices = None
        action.type = None
    out = []
    for action in parser._actions:
        if not action.option_strings or action.nargs is not None:
            continue
        for opt in action.option_strings:
            forms = [[opt]]
            for value in VALUES:
                forms.append([opt, value, "train.py"])
                forms.append([opt + "=" + value, "train.py"])
                if not opt.startswith("--"):
                    forms.append([opt + value, "train.py"])
            for argv in forms:
                out.append("\t".join([verdict(parser, argv)] + argv))
    if not out:
        sys.exit("argparse_cases.py: torchrun's parser has no option that takes a value")
    print("\n".join(out))


if __name__ == "__main__":
    main()
