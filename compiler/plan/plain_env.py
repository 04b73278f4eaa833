"""A plan's plain env and arguments, which are written into the launcher, a ConfigMap and plan.json for anyone who
reads out/ or the namespace to see: no credential, and no name bash owns.

A name is split into words at `_` and `-` (HF_TOKEN, --hub-token); a word marks a credential when it is or holds one of
the markers, spelled whole or run together with other letters (HFTOKEN, DBPASS, GITHUB_PAT), less the common harmless
words that happen to contain one (TOKENIZERS_PARALLELISM, MAX_TOKENS, PASSES, MONKEY_PATCH, PYTHONPATH, AUTHOR). A
value is a credential when it has the shape of a known token or a URL with a password."""

from __future__ import annotations

import re

from pydantic_core import PydanticCustomError

_INSIDE = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "APIKEY", "CREDENTIAL", "PRIVATEKEY", "ACCESSKEY")
_ENDS = ("KEY", "PASS", "PWD")  # DBPASS, MYSQLPWD, OPENAIKEY
_STARTS = ("CRED", "AUTH")  # CREDS, AUTHORIZATION
_WHOLE = {"PAT", "PRIVATE"}  # GITHUB_PAT, SSH_PRIVATE
_HARMLESS = {
    "TOKENS",  # a count: MAX_TOKENS, NUM_TOKENS
    "MONKEY",
    "HOCKEY",
    "TURKEY",
    "DONKEY",
    "JOCKEY",
    "WHISKEY",
    "BYPASS",
    "COMPASS",
    "SURPASS",
    "MULTIPASS",
    "OLDPWD",
    "CREDIT",
    "CREDITS",
    "AUTHOR",
    "AUTHORS",
}
_HARMLESS_PARTS = ("TOKENIZ", "DETOKENIZ", "TOKENS")  # TOKENIZERS_PARALLELISM, MAXTOKENS


def credential_word(name: str) -> str | None:
    """The word of an env or option name that marks it as a credential, or None."""
    for word in re.split(r"[_\-.]+", name.upper().lstrip("-")):
        if word in _WHOLE:
            return word
        if not word or word in _HARMLESS or any(part in word for part in _HARMLESS_PARTS):
            continue
        if (
            any(marker in word for marker in _INSIDE)
            or any(word.endswith(marker) for marker in _ENDS)
            or any(word.startswith(marker) for marker in _STARTS)
        ):
            return word
    return None


# Token shapes, from each issuer's documented format.
TOKEN_SHAPES = (
    ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{20,}"),
    ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("a GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("an AWS access key id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("an API secret key (sk-)", r"\bsk-[A-Za-z0-9_-]{20,}"),
    ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    ("a URL with a password", r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),
)
_SHAPES = [(what, re.compile(pattern)) for what, pattern in TOKEN_SHAPES]


def credential_shape(value: str) -> str | None:
    """What kind of credential a value holds (a token shape, or a URL's password), or None."""
    return next((what for what, pattern in _SHAPES if pattern.search(value)), None)


WHERE_INSTEAD = (
    "keep it out of the plan: in a Kubernetes Secret (cluster.kubernetes.secret_name holds HF_TOKEN; "
    "cluster.kubernetes.object_store.secret's keys reach the pods through envFrom) or in the environment of the "
    "shell that submits the job (sbatch passes it on)"
)


def no_credentials(env: dict[str, str]) -> dict[str, str]:
    """Plain env lands in the launcher, a ConfigMap and plan.json, readable by anyone who reads out/ or the namespace:
    a name that marks a credential (credential_word) or a value shaped like one (credential_shape) is refused."""
    for name, value in env.items():
        word, shape = credential_word(name), credential_shape(value)
        if word or shape:
            why = f"its name holds {word}" if word else f"its value looks like {shape}"
            raise PydanticCustomError(
                "secret-in-plain-env",
                "{name} looks like a credential ({why}); plain env is written into the launcher, a ConfigMap and "
                "plan.json: {instead}",
                {"name": name, "why": why, "instead": WHERE_INSTEAD},
            )
    return env


# Names bash owns (GNU Bash manual, "Bash Variables"): readonly ones (assigning them stops the launcher: "UID: readonly
# variable"), ones bash resets or ignores when assigned (GROUPS, RANDOM, SECONDS, LINENO, FUNCNAME, DIRSTACK ...), and
# ones that change how every later line is read or run (IFS, BASH_ENV, ENV, SHELLOPTS, POSIXLY_CORRECT, PS4 ...).
SHELL_NAMES = frozenset(
    "UID EUID PPID SHELLOPTS BASHOPTS BASH_VERSINFO BASHPID BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_LINENO BASH_SOURCE "
    "BASH_COMMAND BASH_SUBSHELL BASH_REMATCH BASH_ENV BASH_XTRACEFD BASH_COMPAT BASH_ALIASES BASH_CMDS ENV GROUPS "
    "DIRSTACK FUNCNAME HISTCMD LINENO RANDOM SRANDOM SECONDS EPOCHREALTIME EPOCHSECONDS PIPESTATUS IFS OPTIND OPTARG "
    "PWD OLDPWD POSIXLY_CORRECT PS4 GLOBIGNORE CDPATH".split()
)


def no_shell_names(env: dict[str, str]) -> dict[str, str]:
    """The launcher is a bash script that exports each name: a name bash owns cannot be one of the plan's."""
    for name in env:
        if name in SHELL_NAMES:
            raise PydanticCustomError(
                "shell-variable",
                "{name} is a variable bash itself owns (readonly, reset or read by the shell); launch/torchrun.sh "
                "cannot export it. Set it inside the training script, or choose another name",
                {"name": name},
            )
    return env


def no_credential_args(args: list[str]) -> list[str]:
    """Arguments are written into the launcher and plan.json like env: no token-shaped value, and no option named as a
    credential given a value (--hub-token X, --password=X); a bare flag (--use-auth-token) is kept."""
    for i, arg in enumerate(args):
        option, has_value, _ = arg.partition("=")
        given = has_value or (i + 1 < len(args) and not args[i + 1].startswith("-"))
        word = credential_word(option) if arg.startswith("-") and given else None
        shape = credential_shape(arg)
        if word or shape:
            why = f"the option {option} holds {word}" if word else f"it looks like {shape}"
            raise PydanticCustomError(
                "secret-in-args",
                "argument {i} looks like a credential ({why}); arguments are written into the launcher and plan.json: "
                "{instead}, and let the script read it from there",
                {"i": i, "why": why, "instead": WHERE_INSTEAD},
            )
    return args
