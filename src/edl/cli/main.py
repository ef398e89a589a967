"""Entry point of the `edl` command.

Subcommands live in their own modules and are imported only when used, so
`edl validate` does not pay for importing torch or grpc. To add a command,
add one line to COMMANDS: name -> "module:click_command".
"""

from __future__ import annotations

import difflib
import importlib
import sys

import click

COMMANDS: dict[str, str] = {
    # name: "module:attribute" (a click.Command)
    "validate": "edl.cli.validate:validate",
    "plan": "edl.cli.plan:plan",
    "render": "edl.cli.render:render",
    "status": "edl.cli.status:status",
    "logs": "edl.cli.logs:logs",
    "run": "edl.cli.run:run",
    "etcd": "edl.cli.etcd:etcd",
    "crd": "edl.cli.crd:crd",
    "controller": "edl.cli.controller:controller",
    "simulate": "edl.cli.simulate:simulate_command",
    "master": "edl.cli.master:master",
    "pserver": "edl.cli.pserver:pserver",
    "trainer": "edl.cli.trainer:trainer",
    "agent": "edl.cli.agent:agent",
    "rendezvous": "edl.cli.rendezvous:rendezvous",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, plus "did you mean" for a mistyped command."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            close = difflib.get_close_matches(name, COMMANDS, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", package_name="edl")
def cli() -> None:
    """edl: elastic deep learning — validate, plan, simulate and run elastic training jobs.

    Shell completion (click's): eval "$(_EDL_COMPLETE=bash_source edl)" in ~/.bashrc
    (zsh: zsh_source in ~/.zshrc; fish: fish_source).
    """


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; usage and other click errors become one readable line.

    click's standalone mode prints a multi-line usage block for a wrong flag; a
    user (or a script reading stderr) gets one line naming the command instead.
    """
    try:
        result = cli.main(args=argv, prog_name="edl", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as error:
        click.echo(error.format_message())
        sys.exit(2)
    except click.UsageError as error:
        command = error.ctx.command_path if error.ctx is not None else "edl"
        click.echo(f"{command}: {error.format_message()} (see '{command} --help')", err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        click.echo(f"edl: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("edl: interrupted", err=True)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
