"""What looks like a credential in a plan's plain env and arguments, which are written into the launcher, a ConfigMap
and plan.json for anyone who reads out/ or the namespace to see.

A name is split into words at `_` and `-` (HF_TOKEN, --hub-token); a word marks a credential when it is or holds one of
the markers, spelled whole or run together with other letters (HFTOKEN, DBPASS, GITHUB_PAT), less the common harmless
words that happen to contain one (TOKENIZERS_PARALLELISM, MAX_TOKENS, PASSES, MONKEY_PATCH, PYTHONPATH, AUTHOR). A
value is a credential when it has the shape of a known token or a URL with a password."""

from __future__ import annotations

import re

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
