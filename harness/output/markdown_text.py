"""Escaping of user strings (model, family and config names, paths, hosts) for markdown and for plot labels.

Why: an addendum is pasted into mlxcel's design doc as is, so a model name must never change the document's
structure — a `|` would split a table cell, a newline would end the table or start a heading, and HTML would be
rendered (or run) by the viewer. A plot label goes through matplotlib's mathtext, where `$…$` switches to math mode.
Every string that did not come from moecal itself goes through one of these functions before it is written.
"""

from __future__ import annotations

import re

# What can change a document's structure or run in a viewer when it appears inside a line: a table cell separator,
# code spans, emphasis, math (GitHub renders `$…$`), backslash escapes, an HTML tag or autolink (`<` before a letter,
# `/`, `!` or `?`), an entity (`&name;`), a link or image (`](`, `][`). Other punctuation (`[0.95, 1.02]`, `<512`,
# `d_model`) is left as it reads: CommonMark gives it no meaning there.
_ESCAPED = re.compile(r"([\\`*|$~])")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?\w+;)")
_LINK = re.compile(r"\](?=[(\[])")


# bidirectional controls (embeddings, overrides, isolates, marks): a U+202E in a model name displays the rest of
# the line reversed, so an addendum could read other than it is (Trojan Source); they are dropped
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _one_line(text: object) -> str:
    """Newlines and other control characters (Unicode line and paragraph separators too) become spaces: a user
    string never starts a markdown block; bidirectional controls are dropped."""
    return re.sub(r"[\x00-\x1f\x7f\x85\u2028\u2029]+", " ", _BIDI.sub("", str(text))).strip()


def md_text(text: object) -> str:
    """A user string inside markdown prose, a heading or a table cell: one line, markup escaped, HTML shown as text
    (`<b>` reads `&lt;b>`)."""
    line = _ESCAPED.sub(r"\\\1", _one_line(text))
    return _LINK.sub("\\\\]", _TAG_START.sub("&lt;", _ENTITY.sub("&amp;", line)))


def md_code(text: object) -> str:
    """A user string shown as inline code: backticks in it get a longer fence (CommonMark), HTML is inert inside
    code spans, and a `|` is escaped because GitHub splits table cells on it even inside code."""
    line = _one_line(text).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return f"{fence}{pad}{line}{pad}{fence}"


def plot_label(text: object) -> str:
    """A user string in a matplotlib label: one line, `$` escaped so mathtext never switches to math mode."""
    return _one_line(text).replace("$", r"\$")
