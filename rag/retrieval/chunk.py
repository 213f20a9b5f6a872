"""Split a knowledge-base folder of Markdown files into passages."""
from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from rag.io import InputError, line_of_byte, normalise_text
from rag.voice.quarantine import instruction_like


@dataclass(frozen=True)
class Passage:
    """One paragraph of a KB document. ``id`` is ``"<doc>#<n>"`` with n counted from 1; a paragraph
    longer than the embedder reads (`token_count` > ``rag.retrieval.embed.MAX_TOKENS``) is split at sentence
    boundaries into passages ``"<doc>#<n>.1"``, ``"<doc>#<n>.2"``, ... (later paragraphs keep their n). ``heading``:
    the nearest Markdown heading above the paragraph ("" if none); ``indexed``, what the lexical lists (BM25 and the
    phonetic list of `rag.retrieval.search.PassageIndex`) match, leads the paragraph with it (`with_heading`). The
    dense list embeds ``text`` alone: with the heading in the embedding too, the clinic's near misses scored higher
    and the refitted gate refused fewer of them (README, "Retrieval on the clinic questions")."""

    id: str
    doc: str
    text: str
    heading: str = ""

    @property
    def indexed(self) -> str:
        """The passage as the lexical lists read it: ``text`` led by ``heading`` (`with_heading`)."""
        return with_heading(self.heading, self.text)


def with_heading(heading: str, text: str) -> str:
    """``text`` led by ``heading`` as a sentence of its own ("Opening Hours. On Sunday ..."; no full stop added after
    a heading ending in . ! ? or :), so a question naming the topic ("what are your hours on sunday") finds a paragraph
    that never repeats it: BEIR's title + text indexing (Thakur et al. 2021), as the Korean track indexes KorQuAD's
    titles (params ``ko.index_title``). ``text`` alone when ``heading`` is empty."""
    if not heading:
        return text
    return f"{heading} {text}" if heading[-1] in ".!?:" else f"{heading}. {text}"


@functools.lru_cache(maxsize=1)
def _tokenizer():
    """The MiniLM tokenizer without the file's fixed truncation and padding (imported on first use)."""
    from tokenizers import Tokenizer

    from rag.retrieval.embed import TOKENIZER_PATH

    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.no_truncation()
    tok.no_padding()
    return tok


def token_count(text: str, special: bool = True) -> int:
    """MiniLM tokens of ``text`` as the embedder counts them (with [CLS] and [SEP] when ``special``)."""
    return len(_tokenizer().encode(text, add_special_tokens=special).ids)


def _max_tokens() -> int:
    from rag.retrieval.embed import MAX_TOKENS

    return MAX_TOKENS


def split_long(text: str, max_tokens: int, where: str = "") -> list[str]:
    """``text`` as one piece if it fits in ``max_tokens`` MiniLM tokens (with [CLS]/[SEP]), else runs of
    whole sentences (`rag.voice.verify.split_sentences`) packed greedily in order, each within the limit.
    A single sentence over the limit stays whole, with a warning naming ``where``; nothing is dropped."""
    # every WordPiece token covers at least one non-space character: short texts need no tokenizer
    if len("".join(text.split())) + 2 <= max_tokens or token_count(text) <= max_tokens:
        return [text]
    from rag.voice.verify import split_sentences

    pieces: list[list[str]] = []
    used = 0
    for s in split_sentences(text):
        n = token_count(s, special=False)
        if n + 2 > max_tokens:
            warnings.warn(f"{where}: a sentence of {n + 2} tokens is longer than the embedder's {max_tokens}; "
                          f"kept whole, the embedder reads only its start: {s[:60]!r}", stacklevel=3)
        if pieces and used + n + 2 <= max_tokens:
            pieces[-1].append(s)
            used += n
        else:
            pieces.append([s])
            used = n
    return [" ".join(p) for p in pieces]


@dataclass(frozen=True)
class Block:
    """One blank-line-separated piece of a KB document. ``n``: its paragraph number, counted from 1 over the
    pieces that become passages (None for an empty piece or a heading block, one starting with ``#``);
    ``line``: the file line it starts on (1-based); ``raw``: its text with line breaks; ``cue``: why it is
    quarantined (`rag.voice.quarantine.instruction_like`), None when it is not."""

    n: int | None
    line: int
    raw: str
    cue: str | None

    @property
    def text(self) -> str:
        return " ".join(self.raw.split())


def blocks(text: str) -> list[Block]:
    """``text`` (a KB file's content) normalised (`rag.io.normalise_text`: a leading byte-order mark dropped,
    NFKC, or NFC for Hangul; CRLF and CR line ends read as LF) and split on blank lines, every piece judged by
    `rag.voice.quarantine.instruction_like`. `chunk_document` and `load_kb` both read a document through this, so the
    passages, the enum, the sentence candidates and the verifier drop the same paragraphs. A heading line (one
    starting with ``#``) is a block of its own wherever it stands, so "# Hours" directly above its paragraph, or a
    file with no blank lines at all, still gives one paragraph per heading's text."""
    text = normalise_text(text).replace("\r\n", "\n").replace("\r", "\n")
    out, n, line = [], 0, 1
    for piece in text.split("\n\n"):
        for offset, raw in _heading_split(piece):
            folded = " ".join(raw.split())
            start = line + offset + len(raw) - len(raw.lstrip("\n"))
            if folded and not folded.startswith("#"):
                n += 1
                out.append(Block(n, start, raw, instruction_like(raw)))
            else:
                out.append(Block(None, start, raw, instruction_like(raw) if folded else None))
        line += piece.count("\n") + 2
    return out


def _heading_split(piece: str) -> list[tuple[int, str]]:
    """``(line offset, text)`` of the runs of a blank-line-separated ``piece``: each heading line alone, the lines
    between headings together."""
    lines = piece.split("\n")
    if not any(x.lstrip().startswith("#") for x in lines):
        return [(0, piece)]
    runs: list[tuple[int, list[str]]] = []
    for i, x in enumerate(lines):
        if x.lstrip().startswith("#") or not runs or runs[-1][1][0].lstrip().startswith("#"):
            runs.append((i, [x]))
        else:
            runs[-1][1].append(x)
    return [(i, "\n".join(xs)) for i, xs in runs]


def quarantine_rows(blocks_: list[Block], file: str) -> list[dict]:
    """``{file, paragraph, line, cue, text}`` of every quarantined block (paragraph: its number as in the
    passage ids ``<doc>#<n>``, None for a heading block)."""
    return [{"file": file, "paragraph": b.n, "line": b.line, "cue": b.cue, "text": b.text} for b in blocks_ if b.cue]


def chunk_document(doc: str, text: str, max_tokens: int | None = None, source: str | None = None,
                   allow_instructions: bool = False) -> list[Passage]:
    """Split ``text`` on blank lines; drop empty pieces and headings (pieces starting with ``#``);
    fold whitespace runs to one space; each passage keeps the nearest heading above it (`Passage.heading`; a
    quarantined heading leads nothing). The text is normalised first (`rag.io.normalise_text`: a leading
    byte-order mark dropped, NFKC, or NFC for Hangul); CRLF and CR line ends count as line ends.
    Instruction-like paragraphs (`rag.voice.quarantine.instruction_like`) are dropped unless ``allow_instructions``;
    the paragraphs after one keep their numbers. A paragraph over ``max_tokens`` MiniLM tokens (default
    ``rag.retrieval.embed.MAX_TOKENS``) is split at sentence boundaries (`split_long`); ``source`` (default ``doc``)
    names the file in its warnings."""
    limit = _max_tokens() if max_tokens is None else max_tokens
    out, heading = [], ""
    for b in blocks(text):
        if b.n is None:
            if b.text.startswith("#"):
                heading = "" if b.cue else b.text.lstrip("#").strip()
            continue
        if b.cue and not allow_instructions:
            continue
        n = b.n
        parts = split_long(b.text, limit, f"{source or doc}: paragraph {n}")
        if len(parts) == 1:
            out.append(Passage(f"{doc}#{n}", doc, parts[0], heading))
        else:
            out.extend(Passage(f"{doc}#{n}.{m}", doc, q, heading) for m, q in enumerate(parts, 1))
    return out


def _read(f: Path) -> str:
    """A KB file's text, read as ``utf-8-sig`` (a UTF-8 byte-order mark never reaches a passage), without what
    Markdown never shows (`unrendered`)."""
    try:
        text = f.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{f}:{line_of_byte(e.object, e.start)}: not UTF-8 text ({e.reason} at byte "
                         f"{e.start})") from None
    except OSError as e:  # no permission, an I/O error
        raise InputError(f"{f}: cannot read ({e.strerror or e})") from None
    if "\x00" in text:
        raise InputError(f"{f}: not a text file (NUL byte at character {text.index(chr(0))})")
    return unrendered(text)


# YAML front matter (a first line "---", up to the next "---" or "...") and HTML comments: metadata and notes to
# editors that a rendered page never shows, so never indexed or said ("<!-- staff discount code 1234 -->").
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*$", re.S | re.M)
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
# CommonMark: a line of three or more "-", "*" or "_" (spaces between allowed) is a thematic break, a drawn rule with
# nothing to say; a line of only "=" or only "-" directly under a line of text underlines it as a heading (setext).
_THEMATIC_BREAK = re.compile(r"[ ]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t\r]*")
_SETEXT_UNDERLINE = re.compile(r"[ ]{0,3}(?:=+|-+)[ \t\r]*")
# A list item's marker: "- ", "* ", "+ ", "2. ", "3) ", or the marker alone on its line (an empty item; CommonMark).
LIST_ITEM = re.compile(r"[ \t]{0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
# Inline Markdown as a rendered page shows it (CommonMark), in order: a heading's closing "#"s, a link reference
# definition (never shown), an image (its alt text), a link (its text), an autolink (the address), a code span (its
# text), struck-out text (gone: "~~$40~~ $35" costs $35), strong and emphasis ("*" also inside a word, "_" not: file_name
# stays), and an HTML tag. A caller hears "Parking is free", never "**Parking** is free" or "[our map](http://...)".
_INLINE = ((re.compile(r"^([ ]{0,3}#{1,6}[ \t].*?)[ \t]+#+[ \t]*(\r?)$"), r"\1\2"),
           (re.compile(r"^[ ]{0,3}\[[^\]\n]+\]:[ \t]*\S+.*?(\r?)$"), r"\1"),
           (re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),
           (re.compile(r"\[([^\]\n]+)\](?:\([^)\n]*\)|\[[^\]\n]*\])"), r"\1"),
           (re.compile(r"<((?:https?|mailto):[^>\s]+)>"), r"\1"),
           (re.compile(r"(`+)(.+?)\1"), r"\2"),
           (re.compile(r"~~(?=\S)(.+?)~~"), ""),
           (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),
           (re.compile(r"\*(?=[^\s*])(.+?)(?<=[^\s*])\*"), r"\1"),
           (re.compile(r"(?<!\w)_(?=[^\s_])(.+?)(?<=[^\s_])_(?!\w)"), r"\1"),
           (re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>"), ""))


def rendered_inline(line: str) -> str:
    """One line of Markdown with its inline markup rendered to the text a page shows (`_INLINE`): "## **Busan** branch
    ##" -> "## Busan branch", "See [our map](http://x)." -> "See our map.". Line breaks are never added or removed."""
    for pattern, replacement in _INLINE:
        line = pattern.sub(replacement, line)
    return line


def unrendered(text: str) -> str:
    """``text`` with its YAML front matter, HTML comments and thematic breaks blanked, each replaced by its own line
    breaks so the lines after keep their numbers (errors and quarantine reports name file:line), and a setext
    heading ("Hours" over "=====" or "-----") written as an ATX one ("# Hours"), and inline markup rendered
    (`rendered_inline`: emphasis, links, images, code spans, HTML tags). An unclosed comment runs to the end of the
    file, as a browser reads it."""
    lines = _HTML_COMMENT.sub(_line_breaks, _FRONT_MATTER.sub(_line_breaks, text)).split("\n")
    out = list(lines)
    for i, line in enumerate(lines):
        above = lines[i - 1] if i else ""
        under_text = bool(above.strip()) and not above.lstrip().startswith("#") and not LIST_ITEM.match(above) \
            and not _THEMATIC_BREAK.fullmatch(above) and not _SETEXT_UNDERLINE.fullmatch(above)
        if under_text and _SETEXT_UNDERLINE.fullmatch(line):
            out[i - 1], out[i] = "# " + above.strip(), ""
        elif _THEMATIC_BREAK.fullmatch(line):
            out[i] = ""
    return "\n".join(rendered_inline(line) for line in out)


def _line_breaks(m: re.Match) -> str:
    return "\n" * m.group(0).count("\n")


def kb_files(folder: str | Path) -> list[Path]:
    """The Markdown files of a KB folder (suffix ``.md`` in any case: ``.MD`` too), in name order; hidden files
    (``.notes.md``, an editor's ``.#draft.md``) and subfolders (``old.md/`` too) are not read. Raises InputError if
    the folder is missing or a file, holds no Markdown file, one of them is not a readable file, or two names differ only in
    case (``faq.md`` and ``faq.MD``: one document id; ``faq.md`` and ``FAQ.md``: one file where case is ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: " + ("a file, not a knowledge-base folder" if folder.exists() else
                                          "knowledge-base folder not found"))
    files = sorted(f for f in folder.iterdir()
                   if f.suffix.lower() == ".md" and not f.name.startswith(".") and not f.is_dir())
    if not files:
        raise InputError(f"{folder}: no .md files")
    seen: dict[str, Path] = {}
    for f in files:
        if not f.is_file():
            raise InputError(f"{f}: not a regular file (a broken link, a pipe or a device)")
        key = f.stem.casefold()
        if key in seen:
            same = "same document id" if f.stem == seen[key].stem else "document id differing only in case from"
            raise InputError(f"{f}: {same} {seen[key].stem!r} ({seen[key].name}; one file on a case-insensitive file "
                             "system: rename one)")
        seen[key] = f
    return files


def chunk_folder(folder: str | Path, allow_instructions: bool = False) -> list[Passage]:
    """Passages of every ``*.md`` file in ``folder``, files in name order; doc = file stem. Instruction-like
    paragraphs are quarantined (left out, see `quarantine_report`) unless ``allow_instructions``.

    Raises InputError if the folder is missing, holds no .md file, has a .md that is not a
    readable UTF-8 file, or yields no passage at all (for example heading-only files).
    """
    passages = []
    for f in kb_files(folder):
        passages.extend(chunk_document(f.stem, _read(f), source=str(f), allow_instructions=allow_instructions))
    if not passages:
        held = 0 if allow_instructions else len(quarantine_report(folder))
        raise InputError(f"{folder}: no passages (every file is empty or headings only)" if not held else
                         f"{folder}: no passages left: all {held} paragraphs are quarantined as instruction-like "
                         f"(voice.allow_instructions keeps them)")
    return passages


def load_kb(folder: str | Path, allow_instructions: bool = False) -> dict[str, str]:
    """``{doc name: full text}`` of every Markdown file of ``folder`` (`kb_files`) (the form `rag.voice.verify` takes), read as
    ``utf-8-sig`` and normalised like the passages (`rag.io.normalise_text`). Unless ``allow_instructions``,
    a document with quarantined paragraphs (`blocks`) is its other blocks joined by blank lines (LF line ends),
    so no sentence of a quarantined paragraph is a candidate or verifies an answer; other documents are as read."""
    out = {}
    for p in kb_files(folder):
        text = normalise_text(_read(p))
        bs = [] if allow_instructions else blocks(text)
        out[p.stem] = "\n\n".join(b.raw for b in bs if not b.cue) if any(b.cue for b in bs) else text
    return out


def kb_blocks(folder: str | Path) -> list[tuple[Path, list[Block]]]:
    """Every ``*.md`` of ``folder`` (name order) with its `blocks`. Raises InputError like `chunk_folder` for a
    missing folder, one without .md files or an unreadable file."""
    return [(f, blocks(_read(f))) for f in kb_files(folder)]


def quarantine_report(folder: str | Path) -> list[dict]:
    """The instruction-like paragraphs of every ``*.md`` in ``folder`` (files in name order):
    ``{file, paragraph, line, cue, text}`` (`quarantine_rows`; file as ``folder/name.md``). Listed whether or not
    the reader keeps them. Raises InputError like `chunk_folder` for a missing or unreadable folder."""
    return [row for f, bs in kb_blocks(folder) for row in quarantine_rows(bs, str(f))]
