"""A griffe extension for the API reference: render the house docstring style well.

Two things in the package's Google-style docstrings need help before griffe parses them
(only the rendering changes, never the source):

- The `>>>` examples sit right under `Example:`, at the docstring's own indentation (the
  house style, run by `pytest --doctest-modules`). Markdown would read those lines as
  block quotes, so each run of doctest lines (prompts, continuations and expected output,
  up to a blank line) is wrapped in a `pycon` fence.
- `Call arguments:` is not a Google section; griffe shows it as an admonition, in which
  each `name: description` entry becomes a list item so the entries do not run together.
"""

import re

import griffe

_ENTRY = re.compile(r"^(\s*)(\*{0,2}\w+): (.*)$")


def fence_doctests(text):
    """`text` with every run of doctest lines wrapped in a fenced `pycon` block.

    A run starts at a `>>>` line and ends at a blank line or a line indented less than
    its prompt (tested in `tests/test_docs.py`; a doctest here would fence itself).
    """
    out, fence, inside = [], "", False
    for line in text.splitlines():
        stripped = line.lstrip()
        if not inside and stripped.startswith(">>>"):
            fence = line[: len(line) - len(stripped)]
            if out and out[-1].strip():
                out.append("")
            out.append(fence + "```pycon")
            inside = True
        elif inside and (not stripped or len(line) - len(stripped) < len(fence)):
            out.append(fence + "```")
            inside = False
        out.append(line)
    if inside:
        out.append(fence + "```")
    return "\n".join(out)


def list_call_arguments(text):
    """`text` with each entry of a `Call arguments:` section turned into a list item.

    Entries are the section's least-indented `name: description` lines; deeper lines
    continue the entry before them.
    """
    out, section_indent, entry_indent = [], None, None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() == "Call arguments:":
            section_indent, entry_indent = indent, None
        elif section_indent is not None and line.strip():
            if indent <= section_indent:
                section_indent = None
            else:
                entry_indent = indent if entry_indent is None else entry_indent
                match = _ENTRY.match(line)
                if indent == entry_indent and match:
                    line = f"{match.group(1)}- `{match.group(2)}`: {match.group(3)}"
        out.append(line)
    return "\n".join(out)


class HouseDocstrings(griffe.Extension):
    """Rewrite each object's docstring as it is loaded (see the module docstring)."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is None:
            return
        value = obj.docstring.value
        if ">>>" in value:
            value = fence_doctests(value)
        if "Call arguments:" in value:
            value = list_call_arguments(value)
        obj.docstring.value = value
