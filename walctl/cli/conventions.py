"""The CLI's conventions, applied to every command the app is built with (docs/CLI.md
"Configuration"): each option's ``WALCTL_<OPTION>`` variable and the expected short options, and
``--json``/``--debug`` on either side of the command name."""

from __future__ import annotations

# Short options operators expect, added to every command that has the long one (and not the short).
SHORT_OPTIONS = {"--json": "-j", "--limit": "-n", "--stream": "-s"}
# Options that are the same on both sides of the command name: ``walctl --json status`` and
# ``walctl status --debug`` work. The root owns --debug and --quiet; commands own --json.
ROOT_ANYWHERE = ("--debug", "--quiet", "-q")
COMMAND_ANYWHERE = ("--json", "-j")
# typer's own shell-completion options take no environment variable.
NO_ENV = {"help", "install_completion", "show_completion", "version"}
# Variables an option kept from before the WALCTL_<OPTION> rule (still honoured, after the new name).
LEGACY_ENV = {"engine": ("WALCTL_IO_ENGINE",), "endpoint_url": ("AWS_ENDPOINT_URL",)}
# Arguments a command requires though click may leave them empty: trim's OFFSET takes DEVICE's place
# when WALCTL_DEVICE names the device (``walctl trim 4096``); the usage shows them required.
REQUIRED_IN_USAGE = {("trim", "offset")}
# Options that let a command destroy data: set from the environment (a WALCTL_FORCE=1 forgotten in
# a shell or a unit file applies to every run), they say so on stderr each time they take effect.
LOUD_FROM_ENV = ("force", "discard_unuploaded")


def env_name(param) -> str:
    """``WALCTL_<OPTION>``: the option's long name, upper case, dashes as underscores."""
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    name = longs[0][2:] if longs else param.name
    return "WALCTL_" + name.upper().replace("-", "_")


def apply_conventions(command) -> None:
    """Give every option of ``command`` its WALCTL_<OPTION> variable (shown in --help) and the
    expected short options; idempotent. Runs on every command the app is built with, so an
    option added later follows the rules without any code of its own."""
    from walctl.cli.examples import epilog

    if getattr(command, "epilog", None) is None and epilog(command.name or ""):
        command.epilog = epilog(command.name)
    for param in command.params:
        if (command.name, param.name) in REQUIRED_IN_USAGE:
            shown = "{" + param.name.upper() + "}"
            param._usage_display_name = lambda shown=shown: shown
    taken = {o for p in command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option" or param.name in NO_ENV or param.hidden:
            continue
        wanted = (env_name(param), *LEGACY_ENV.get(param.name, ()))
        current = () if param.envvar is None else ((param.envvar,) if isinstance(param.envvar, str)
                                                   else tuple(param.envvar))
        envvars = tuple(dict.fromkeys((*wanted, *current)))
        param.envvar = envvars[0] if len(envvars) == 1 else list(envvars)
        param.show_envvar = True
        if param.name in LOUD_FROM_ENV and not getattr(param, "_walctl_loud", False):
            param.callback = _loud_from_env(param.callback)
            param._walctl_loud = True
        for long, short in SHORT_OPTIONS.items():
            if long in param.opts and short not in taken:
                param.opts.append(short)
                taken.add(short)


def _loud_from_env(callback):
    """Wrap an option's callback: a true value that came from the environment is said on stderr."""
    import sys

    def loud(ctx, param, value):
        source = ctx.get_parameter_source(param.name)
        if value and getattr(source, "name", None) == "ENVIRONMENT":
            names = param.envvar if isinstance(param.envvar, str) else "/".join(param.envvar)
            print(f"walctl: warning: {param.opts[0]} is set by the environment ({names}); "
                       f"unset it unless every run should use it", file=sys.stderr)
        return callback(ctx, param, value) if callback is not None else value

    return loud


def normalise_args(args: list[str], group) -> list[str]:
    """Move --debug before the command name and --json after it, wherever the operator typed them."""
    names = set(group.commands)
    out_root, out_cmd, rest = [], [], list(args)
    i = 0
    while i < len(rest):  # the root part: until the command name
        token = rest[i]
        if token in names:
            break
        if token in COMMAND_ANYWHERE:
            out_cmd.append(token)
        else:
            out_root.append(token)  # root options take no value today
        i += 1
    if i >= len(rest):
        return out_root + out_cmd
    name, tail = rest[i], rest[i + 1:]
    kept = []
    for j, token in enumerate(tail):
        if token == "--":
            kept += tail[j:]
            break
        if token in ROOT_ANYWHERE:
            out_root.append(token)
        else:
            kept.append(token)
    return out_root + [name] + out_cmd + kept


def json_requested(args: list[str]) -> bool:
    """--json on the command line (or WALCTL_JSON): a usage error still ends with a JSON object."""
    import os

    cut = args.index("--") if "--" in args else len(args)
    if any(a in COMMAND_ANYWHERE for a in args[:cut]):
        return True
    return os.environ.get("WALCTL_JSON", "").strip().lower() in ("1", "true", "yes", "on", "y", "t")
