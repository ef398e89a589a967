"""Entry point of the `edl` command.

Subcommands live in their own modules and are imported only when used, so
`edl validate` does not pay for importing torch or grpc. To add a command,
add one line to COMMANDS: name -> "module:click_command".
"""

from __future__ import annotations

import importlib
import sys

import click

COMMANDS: dict[str, str] = {
    # name: "module:attribute" (a click.Command)
    "validate": "edl.cli.validate:validate",
    "plan": "edl.cli.plan:plan",
    "render": "edl.cli.render:render",
    "status": "edl.cli.status:status",
    "run": "edl.cli.run:run",
    "etcd": "edl.cli.etcd:etcd",
    "crd": "edl.cli.crd:crd",
    "controller": "edl.cli.controller:controller",
    "simulate": "edl.cli.simulate:simulate_command",
    "master": "edl.cli.master:master",
    "pserver": "edl.cli.pserver:pserver",
    "trainer": "edl.cli.trainer:trainer",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edl")
def cli() -> None:
    """edl: elastic deep learning — validate, plan, simulate and run elastic training jobs."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; unexpected errors become one readable line and exit status 1."""
    try:
        cli.main(args=argv, prog_name="edl", standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("edl: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
