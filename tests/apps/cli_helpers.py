"""Helpers shared by the command-line tests."""


def exit_status(main, args) -> int:
    """Exit status of a command's main(), counting argparse's own usage errors (SystemExit)."""
    try:
        return main(args)
    except SystemExit as exit:
        return exit.code
