"""What a container process really receives from a Pod spec's env values, command and args."""

from __future__ import annotations


def kubelet_expand(text: str, defined: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion (kubernetes third_party/forked/golang/expansion/expand.go), ported to test
    what a process really receives: `$$` -> `$`, `$(NAME)` -> value of an earlier variable, else kept."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(defined.get(name, f"$({name})"))
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
