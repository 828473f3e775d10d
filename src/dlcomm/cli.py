"""``dlcomm``: the command line. Subcommands parse with argparse; run settings are Hydra
overrides (``key=value``) composed over the configs shipped in the package."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from dlcomm.errors import EXIT_USAGE, UserError

_EPILOG = """examples:
  dlcomm train                                   4 workers, AllReduce-SGD, small CNN, Fashion-MNIST
  dlcomm train algo=local_sgd algo.period=4 nodes=8
  dlcomm train model=resnet18 model.cifar_stem=true dataset=synthetic dataset.shape=[3,32,32]
  dlcomm config algo=local_sgd                   print the composed configuration
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlcomm",
        description="Run and compare communication schemes of distributed deep learning.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    train = sub.add_parser("train", help="run one training job (overrides: key=value ...)")
    train.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. algo=local_sgd nodes=8 train.epochs=3")
    show = sub.add_parser("config", help="print the composed configuration for the given overrides")
    show.add_argument("overrides", nargs="*")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return EXIT_USAGE
    try:
        if args.command == "config":
            return _show_config(args.overrides)
        return _train(args.overrides)
    except UserError as error:
        print(f"dlcomm: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("dlcomm: interrupted", file=sys.stderr)
        return 130


def _show_config(overrides: list[str]) -> int:
    from omegaconf import OmegaConf

    from dlcomm.config.compose import compose

    print(OmegaConf.to_yaml(compose(overrides)), end="")
    return 0


def _train(overrides: list[str]) -> int:
    from dlcomm.run import prepare_run, run_local, run_slurm

    spec = prepare_run(overrides)
    return run_slurm(spec) if spec.config["launcher"]["name"] == "slurm" else run_local(spec)


if __name__ == "__main__":
    sys.exit(main())
