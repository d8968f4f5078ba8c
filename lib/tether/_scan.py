"""The stray-figure scanner: performance figures and claim words typed by hand.

Every number and claim that tether publishes is rendered from the store. A figure typed into
a hand-written paragraph, a comment or a docstring is a copy that the next measurement will
silently contradict, so ``tether check`` reports each one with its file and line. Generated
regions are skipped (their content is diffed against a fresh render instead), and a line that
carries the allow marker is skipped for the rare legitimate case.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tether import project
from tether._pysource import docstring_owners
from tether.errors import UsageError
from tether.textfile import read_text

ALLOW_MARKER = "tether: allow-figure"

# Folders never scanned: environments, the store, rendered output, VCS and tool caches.
_SKIP_DIRS = frozenset(
    {".venv", "venv", "results", "scratch", ".git", "node_modules", "__pycache__", "build", "dist"}
)

# Region markers, Python (# ...) and Markdown (<!-- ... -->) alike.
_BEGIN = re.compile(r"BEGIN GENERATED:\s*([A-Za-z0-9][A-Za-z0-9._:+-]*)")
_END = re.compile(r"END GENERATED:\s*([A-Za-z0-9][A-Za-z0-9._:+-]*)")

# The words a performance claim is made of. A project tunes them in [tool.tether.scan]:
# ``allow_words`` drops some (in an ML repository "loss" is a noun), ``claim_words`` adds.
PERF_WORDS: tuple[str, ...] = (
    "faster",
    "slower",
    "speed-?ups?",
    "throughput",
    r"regress\w*",
    "gains?",
    "wins?",
    "loss(?:es)?",
    "loses?",
    "quicker",
    "outperforms?",
    "outpaces?",
    "beats?",
    "ahead",
    "behind",
    "trails?",
    "trailed",
    "trailing",
    "lags?",
    "lagged",
)
# Numbers written as words: a percentage, a ratio or a fold spelled out.
_NUMBER_WORDS = (
    r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|sixty|seventy|eighty|ninety|a\s+hundred|hundred)"
)
_FOLD_WORDS = r"(?:two|three|four|five|six|seven|eight|nine|ten)fold"
# A quantifier over a set of measured things: "every tile", "all cells", "no shape", "each row".
_QUANTIFIED = r"\b(?:every|all|each|no|none\s+of\s+the)\s+(?:[+\w-]+\s+){0,3}?"
_SET_NOUNS = r"(?:shapes?|cells?|sizes?|lengths?|calls?|configs?|cases?|tiles?|points?|rows?)"
_NUMBER = r"(?<![\w.])\d+(?:\.\d+)?"
_PERCENT = r"(?:%|percent\b|per\s?cent\b|pct\b)"

# Issue 47: a comparison said in words with no figure is a claim as much as a typed ratio is
# (validate/suite/test_check_scan.py holds the examples). Two shapes: a quantifier adverb
# over a performance word, and a comparative word in a line that names a measured subject
# (an arm, a kernel, an entry point: [tool.tether.scan] subjects). Ordinary prose keeps its
# idioms: reading speed, compiling before the call, a flag, a test of old bugs, the noun loss.
_ADVERBS = r"\b(?:never|always|nowhere|consistently|invariably|uniformly|everywhere)\b"
COMPARATIVE_WORDS: tuple[str, ...] = (
    r"faster(?!\s+to\s+(?:read|write|review|type|find|scan|follow|learn|edit|set\s+up))",
    r"slower(?!\s+to\s+(?:read|write|review|type|find|scan|follow|learn|edit|set\s+up))",
    r"quicker(?!\s+to\s+(?:read|write|review|type|find|scan|follow|learn|edit))",
    r"(?:is|are|was|were|stays?|stayed|runs?|ran|pulls?|falls?|fell|lands?)\s+(?:well\s+|far\s+|still\s+)?(?:ahead|behind)\b",
    r"ahead\s+of(?!\s+(?:time|the\s+(?:call|launch|run|sweep|timed|lock)))",
    r"outperforms?",
    r"outpaces?",
    r"beats?",
    r"trails?",
    r"trailed",
    r"lags?",
    r"lagged",
    r"regress(?:es|ed|ing)?(?!ion\s+tests?)",
    r"regressions?(?!\s+tests?)",
    r"wins?",
    r"loses?",
    r"(?:loss|gain|win)(?:es|s)?\s+(?:against|to|over|versus|vs\.?|on|at)",
)
# Comparative words in phrases that compare no measurement: precedence ("the first that
# matches wins", "route order puts X ahead of Y"). Blanked from a line before its claims are
# read (never from its figures: a ratio stays a ratio wherever it is typed).
_IDIOMS = re.compile(
    r"\b(?:first|last|later|earlier)\b[^\n.;:]{0,60}?\bwins\b"
    r"|\b(?:route|routing|order|list|queue)\b[^\n.;:]{0,60}?\bahead\s+of\b"
    r"|\bahead\s+of\b[^\n.;:]{0,60}?\b(?:in|on)\s+(?:the\s+|its\s+)?(?:route|order|list)\b",
    re.IGNORECASE,
)
# Who a comparison is about by default: what every kernel project measures. A project names its
# own arms, kernels and entry points in [tool.tether.scan] subjects.
SUBJECT_WORDS: tuple[str, ...] = (
    "kernels?",
    "arms?",
    "backends?",
    r"entry\s+points?",
    "implementations?",
)
# What a rendered expression must read to support a comparison beside it in a template: a
# verdict or a figure ([tool.tether.scan] support_names adds). A run id or a label supports
# nothing.
SUPPORT_NAMES: tuple[str, ...] = (
    "word",
    "words",
    "verdict",
    "verdict_word",
    "geomean",
    "ratio",
    "rate",
    "tflops",
    "wins",
    "losses",
    "levels",
    "claim",
    "claims",
    "passes",
    "passed",
    "outcome",
    "pct",
    "speedup",
    "regret",
)


def _alternation(words: Iterable[str]) -> str:
    words = tuple(words)
    return r"(?:" + "|".join(words) + r")" if words else r"(?!x)x"


def _vocabulary_patterns(
    words: tuple[str, ...], comparatives: tuple[str, ...], subjects: tuple[str, ...]
) -> tuple[tuple[re.Pattern[str], str], ...]:
    """The scanner's (pattern, what) pairs for a claim vocabulary; the description lands in
    the finding."""
    perf = _alternation(words)
    comp = _alternation(comparatives)
    subj = _alternation(subjects)
    return (
        # A ratio, not a product of dimensions: ``2048 × 2048`` is a shape.
        (re.compile(_NUMBER + r"\s?×(?!\s?\d)"), "ratio figure"),
        (re.compile(_NUMBER + r"x(?![\w])"), "ratio figure"),
        # The decimal keeps ``x86`` and ``x4`` (a batch count) out.
        (re.compile(r"(?<![\w.])[x×]\d+\.\d+(?![\w.])"), "ratio figure"),
        (
            re.compile(
                r"(?:" + _NUMBER + r"|\b" + _NUMBER_WORDS + r")[\s-]+(?:times|fold)\b"
                r"[^\n]{0,40}?\b" + perf + r"\b",
                re.IGNORECASE,
            ),
            "ratio figure in words",
        ),
        (
            re.compile(
                r"\b(?:twice|thrice|half)\s+as\s+(?:fast|slow|quick)\b|\b" + _FOLD_WORDS + r"\b"
                r"|" + _NUMBER + r"-fold\b",
                re.IGNORECASE,
            ),
            "ratio figure in words",
        ),
        (
            re.compile(
                r"\bspeed-?ups?\s+(?:of|by|is|was|reaches|reached|near|around)\s+"
                r"(?:about\s+|roughly\s+|nearly\s+|~\s?)?(?:\d|" + _NUMBER_WORDS + r"\b)",
                re.IGNORECASE,
            ),
            "speedup figure",
        ),
        (re.compile(r"(?<![\w])[TGPM]FLOP(?:/s|S)\b", re.IGNORECASE), "throughput figure unit"),
        (
            re.compile(r"\b(?:tera|giga|peta|mega)-?flop(?:s|/s)?\b", re.IGNORECASE),
            "throughput unit in words",
        ),
        (re.compile(r"(?<![\w])[GTM]B/s\b"), "bandwidth figure unit"),
        (
            re.compile(r"\b(?:tera|giga|mega)bytes?\s+(?:per|a)\s+second\b", re.IGNORECASE),
            "bandwidth unit in words",
        ),
        (re.compile(r"(?<![\w])(?:ms|us|µs|ns)/call\b"), "latency figure unit"),
        (
            re.compile(
                _NUMBER
                + r"\s?(?:ms|us|µs|ns|s|milliseconds?|microseconds?)\s+(?:per|a|an)\s+call\b",
                re.IGNORECASE,
            ),
            "latency figure",
        ),
        (
            re.compile(
                _NUMBER + r"\s?" + _PERCENT + r"[^\n]{0,60}?\b" + perf + r"\b"
                r"|\b" + perf + r"\b[^\n]{0,60}?" + _NUMBER + r"\s?" + _PERCENT,
                re.IGNORECASE,
            ),
            "percentage beside a performance word",
        ),
        (
            re.compile(
                r"\b" + _NUMBER_WORDS + r"[\s-]+(?:percent\b|per\s?cent\b|pct\b)"
                r"|" + _NUMBER + r"\s?pct\b",
                re.IGNORECASE,
            ),
            "percentage in words",
        ),
        (re.compile(r"\bmonotonic(?:ally)?\b", re.IGNORECASE), "claim word"),
        (re.compile(r"\bno\s+regressions?\b", re.IGNORECASE), "claim word"),
        (re.compile(r"\bnothing\s+regresses\b", re.IGNORECASE), "claim word"),
        # A quantified set said to gain or to lose, or a gain or loss said over a whole set.
        (
            re.compile(
                _QUANTIFIED + r"(?:is\s+|are\s+|was\s+|were\s+)?" + perf + r"\b", re.IGNORECASE
            ),
            "claim over a set",
        ),
        (
            re.compile(
                r"\b" + perf + r"\b[^\n]{0,60}?\b(?:on|in|at|across|for|over)\s+"
                r"(?:every|all|each)\s+(?:[+\w-]+\s+){0,2}?" + _SET_NOUNS + r"\b",
                re.IGNORECASE,
            ),
            "claim over a set",
        ),
        # An outcome stated as a verdict: a size called level, a goal or target called reached.
        (re.compile(r"\b(?:is|are|stays?|stayed|was|were)\s+level\b", re.IGNORECASE), "claim word"),
        (re.compile(r"\blevel\s+(?:at|on|across)\s+\d", re.IGNORECASE), "claim word"),
        (
            re.compile(
                r"\b(?:goal|target)s?\s+(?:is\s+|are\s+|was\s+|were\s+)?(?:met|missed|reached)\b"
                r"|\bmet\s+only\b",
                re.IGNORECASE,
            ),
            "outcome claim",
        ),
        # Issue 47: worded comparisons with no figure.
        (
            re.compile(_ADVERBS + r"\s+(?:[\w-]+\s+){0,2}?" + perf + r"\b", re.IGNORECASE),
            "claim over a set",
        ),
        (
            re.compile(
                r"\b" + subj + r"\b[^\n]*?\b" + comp + r"\b"
                r"|\b" + comp + r"\b[^\n]*?\b" + subj + r"\b",
                re.IGNORECASE,
            ),
            "comparative claim about a measured subject",
        ),
    )


def _gates(words: tuple[str, ...], comparatives: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    """For each pattern of ``_vocabulary_patterns``, in its order, a regex over the
    *lowercased* text that matches wherever the pattern can (a necessary condition). Gates are
    literals without IGNORECASE, which the regex engine skips ahead to; the full patterns
    (word boundaries, lookbehinds, alternations of words, case rules) run only on the lines
    where their gate matched. This is what keeps the scan of a repository fast."""
    perf = re.compile("|".join(w.lower() for w in words) if words else r"(?!x)x")
    # A comparative's gate is its leading literal (the words before any regex syntax).
    comp = re.compile(
        "|".join(_literal_head(w) for w in comparatives) if comparatives else r"(?!x)x"
    )
    return (
        re.compile("×"),
        re.compile(r"\dx"),
        re.compile(r"[x×]\d"),
        re.compile(r"times|fold"),
        re.compile(r"twice|thrice|half|fold"),
        re.compile(r"speed"),
        re.compile(r"flop"),
        re.compile(r"flop"),
        re.compile(r"b/s"),
        re.compile(r"bytes"),
        re.compile(r"/call"),
        re.compile(r"call"),
        re.compile(r"%|percent|per\s?cent|pct"),
        re.compile(r"percent|per\s?cent|pct"),
        re.compile(r"monoton"),
        re.compile(r"regress"),
        re.compile(r"regress"),
        perf,
        perf,
        re.compile(r"level"),
        re.compile(r"level"),
        re.compile(r"goal|target|met\s"),
        re.compile(r"never|always|nowhere|consistently|invariably|uniformly|everywhere"),
        comp,
    )


def _literal_head(word: str) -> str:
    r"""A gate regex for one comparative pattern: the lowercase literal it starts with
    (``regress(?:es)?`` -> ``regress``), or for ``(?:is|are|...)\s+(?:ahead|behind)`` the
    words after the verb; a pattern with no literal head gates on every line."""
    if word.startswith("(?:is|"):
        return "ahead|behind"
    if word.startswith("(?:loss|"):
        return "loss|gain|win"
    head = re.match(r"[a-z]+", word.lower())
    return re.escape(head.group(0)) if head is not None else ""


@dataclass(frozen=True)
class Vocabulary:
    """A compiled claim vocabulary: every (pattern, what) pair and its gate (``_gates``)."""

    patterns: tuple[tuple[re.Pattern[str], str], ...]
    gates: tuple[re.Pattern[str], ...]
    # Matches a template expression that renders a verdict or a figure (SUPPORT_NAMES).
    supports: re.Pattern[str] = re.compile(r"(?!x)x")

    def search(self, text: str) -> bool:
        """Whether any pattern matches on some line of ``text``: each pattern is tried only on
        the lines where its gate matched (findings are per line, so nothing is lost)."""
        low = text.lower()
        if len(low) != len(text):  # a character whose lowercase is longer: no shortcut
            return any(self.findings(line) for line in text.splitlines())
        for (pattern, _), gate in zip(self.patterns, self.gates, strict=True):
            done = -1
            for hit in gate.finditer(low):
                if hit.start() <= done:
                    continue
                lo = text.rfind("\n", 0, hit.start()) + 1
                hi = text.find("\n", hit.end())
                done = len(text) if hi < 0 else hi
                if pattern.search(text[lo:done]) is not None:
                    return True
        return False

    def findings(self, text: str, figures_only: bool = False) -> list[str]:
        """Each pattern's first match in ``text`` (one line), as descriptions."""
        text = _IDIOMS.sub(lambda m: " " * len(m.group(0)), text)
        low = text.lower()
        exact = len(low) == len(text)
        found = []
        for (pattern, what), gate in zip(self.patterns, self.gates, strict=True):
            if figures_only and not _has_number(pattern):
                continue
            if exact and gate.search(low) is None:
                continue
            match = pattern.search(text)
            if match:
                found.append(f"{what} typed by hand: {match.group(0).strip()!r}")
        return found


_VOCABULARIES: dict[tuple[tuple[str, ...], ...], Vocabulary] = {}


def vocabulary(
    words: tuple[str, ...] = PERF_WORDS,
    comparatives: tuple[str, ...] = COMPARATIVE_WORDS,
    subjects: tuple[str, ...] = SUBJECT_WORDS,
    supports: tuple[str, ...] = SUPPORT_NAMES,
) -> Vocabulary:
    """The scanner for a vocabulary (compiled once per vocabulary): ``words`` the performance
    words, ``comparatives`` the words a comparison is made of, ``subjects`` what is measured
    (regexes), ``supports`` the names a template expression reads when it renders a verdict or
    a figure."""
    key = (words, comparatives, subjects, supports)
    if key not in _VOCABULARIES:
        pats = _vocabulary_patterns(words, comparatives, subjects)
        gates = _gates(words, comparatives)
        if len(gates) != len(pats):
            raise AssertionError("every scanner pattern needs its gate")
        support = re.compile(r"\b" + _alternation(re.escape(n) for n in supports) + r"\b")
        _VOCABULARIES[key] = Vocabulary(pats, gates, support)
    return _VOCABULARIES[key]


def _allowed(pattern: str, allowed: Iterable[str]) -> bool:
    """Whether ``allow_words`` drops the word pattern ``pattern``: a word it matches whole,
    or a word it names (``ahead`` drops ``(?:is|are) ahead``)."""
    return any(
        re.fullmatch(pattern, a, re.IGNORECASE) or re.search(r"\b" + re.escape(a) + r"\b", pattern)
        for a in allowed
    )


def project_vocabulary(root: Path) -> Vocabulary:
    """The vocabulary [tool.tether.scan] declares: PERF_WORDS and COMPARATIVE_WORDS less
    ``allow_words`` (matched whole, case-insensitively, against the words a pattern admits)
    plus ``claim_words``; SUBJECT_WORDS plus ``subjects`` (names of what the project
    measures: its arms, kernels, entry points); SUPPORT_NAMES plus ``support_names``."""

    scan = project.get(root).raw.get("scan", {})
    lists = {}
    for key in ("allow_words", "claim_words", "subjects", "support_names"):
        value = scan.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise UsageError(f"[tool.tether.scan] {key} must be a list of words")
        lists[key] = value
    allowed = [w.lower() for w in lists["allow_words"]]
    extra = tuple(re.escape(w) for w in lists["claim_words"])
    words = tuple(w for w in PERF_WORDS if not _allowed(w, allowed)) + extra
    comparatives = tuple(w for w in COMPARATIVE_WORDS if not _allowed(w, allowed)) + extra
    subjects = SUBJECT_WORDS + tuple(
        r"\s+".join(re.escape(part) for part in w.split()) for w in lists["subjects"]
    )
    supports = SUPPORT_NAMES + tuple(lists["support_names"])
    return vocabulary(words, comparatives, subjects, supports)


@dataclass(frozen=True, order=True)
class Finding:
    """One thing ``tether check`` objects to, printed as ``path:line: what``."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def scan_line(text: str, figures_only: bool = False, vocab: Vocabulary | None = None) -> list[str]:
    """What is wrong with one line of hand-written prose, as descriptions; [] when clean.

    ``figures_only``: report literal figures (a number with a unit, a ratio, a percentage)
    but not claim words or bare units. ``vocab``: the project's claim vocabulary (default:
    PERF_WORDS).
    """
    if ALLOW_MARKER in text:
        return []
    return (vocab or vocabulary()).findings(text, figures_only)


def _has_number(pattern: re.Pattern[str]) -> bool:
    return r"\d" in pattern.pattern


# Jinja syntax: expressions, statements and comments (rendered from data, never typed).
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)


_JINJA_EXPR = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
# A string literal inside a jinja expression or statement: typed text all the same.
_JINJA_STRING = re.compile(r"\"((?:[^\"\\\n]|\\.)*)\"|'((?:[^'\\\n]|\\.)*)'")


def _is_figure(what: str) -> bool:
    """Whether a finding's description names a figure (a number or a unit), not a claim word:
    a figure is never supported by a rendered one beside it, it is a copy of one."""
    return "figure" in what or "unit" in what or "percentage" in what


def scan_template(text: str, path: str, vocab: Vocabulary | None = None) -> list[Finding]:
    """Figures, units and claim words in a jinja template's own text, outside its
    expressions, statements and comments: typed into a template they reach every rendered
    document, and the diff against a fresh render cannot see them. Words a template shows
    by the data's choice come from an expression (``verdict_word``, ``rate``), never from
    its text. The same patterns as in Markdown apply, with one allowance: a claim word
    (not a figure) on a line that renders a verdict or a figure beside it (an expression
    reading a name in ``Vocabulary.supports``: ``{{ r.whole.word }}``, ``{{ x | ratio }}``)
    states what the data says. A string
    literal inside an expression or a statement is typed text: scanned with no allowance."""
    vocab = vocab or vocabulary()
    blanked = _JINJA.sub(
        lambda m: " " * len(m.group(0).split("\n")[0]) + "\n" * m.group(0).count("\n"), text
    )
    original = text.splitlines()
    supported: set[int] = set()
    for match in _JINJA_EXPR.finditer(text):
        if vocab.supports.search(_JINJA_STRING.sub("", match.group(1))):
            first = text.count("\n", 0, match.start()) + 1
            last = first + match.group(0).count("\n")
            supported.update(range(first, last + 1))
    findings = []
    for number, line in enumerate(blanked.splitlines(), start=1):
        if number <= len(original) and ALLOW_MARKER in original[number - 1]:
            continue
        findings += [
            Finding(path, number, what)
            for what in scan_line(line, vocab=vocab)
            if number not in supported or _is_figure(what)
        ]
    for block in _JINJA.finditer(text):
        first = text.count("\n", 0, block.start()) + 1
        if first <= len(original) and ALLOW_MARKER in original[first - 1]:
            continue
        for literal in _JINJA_STRING.finditer(block.group(0)):
            typed = literal.group(1) if literal.group(1) is not None else literal.group(2)
            at = first + block.group(0).count("\n", 0, literal.start())
            findings += [
                Finding(path, at, f"{what} (a string literal in a template expression)")
                for what in scan_line(typed, vocab=vocab)
            ]
    return findings


def generated_lines(lines: list[str], path: str) -> tuple[set[int], list[Finding]]:
    """1-based numbers of lines inside (or marking) generated regions, plus marker errors.

    An unterminated or mismatched region is reported rather than guessed at: treating the
    rest of the file as generated would hide hand-typed figures below it.
    """
    inside: set[int] = set()
    problems: list[Finding] = []
    open_id: str | None = None
    open_line = 0
    for number, line in enumerate(lines, start=1):
        begin = _BEGIN.search(line)
        end = _END.search(line) if begin is None else None
        if begin:
            if open_id is not None:
                problems.append(
                    Finding(
                        path,
                        number,
                        f"generated region {begin.group(1)!r} opens inside "
                        f"region {open_id!r} (opened on line {open_line})",
                    )
                )
            open_id, open_line = begin.group(1), number
        if open_id is not None:
            inside.add(number)
        if end:
            if open_id is None:
                problems.append(
                    Finding(path, number, f"END GENERATED: {end.group(1)} without a BEGIN")
                )
            elif end.group(1) != open_id:
                problems.append(
                    Finding(
                        path,
                        number,
                        f"END GENERATED: {end.group(1)} closes region "
                        f"{open_id!r} (opened on line {open_line})",
                    )
                )
            open_id = None
    if open_id is not None:
        problems.append(
            Finding(
                path, open_line, f"generated region {open_id!r} is never closed (END GENERATED)"
            )
        )
    return inside, problems


def scan_markdown(text: str, path: str, vocab: Vocabulary | None = None) -> list[Finding]:
    """Findings in hand-written Markdown: every line outside generated regions."""
    lines = text.splitlines()
    skip, findings = generated_lines(lines, path)
    for number, line in enumerate(lines, start=1):
        if number not in skip:
            findings += [Finding(path, number, what) for what in scan_line(line, vocab=vocab)]
    return findings


def _prose_lines(text: str) -> Iterator[int]:
    """1-based numbers of lines holding a comment or part of a docstring.

    Parses first so that a broken file raises SyntaxError instead of yielding nothing.
    """
    tree = ast.parse(text)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0]
    for node in docstring_owners(tree):
        doc = node.body[0]
        yield from range(doc.lineno, (doc.end_lineno or doc.lineno) + 1)


def _may_hold_findings(text: str, vocab: Vocabulary | None = None) -> bool:
    # Cheap whole-file test first: most files hold no figure-like text and no region marker,
    # and tokenizing and parsing them is most of the scan's time.
    return "GENERATED:" in text or (vocab or vocabulary()).search(text)


def scan_python(text: str, path: str, vocab: Vocabulary | None = None) -> list[Finding]:
    """Findings in a Python file's comments and docstrings outside generated regions.

    A file that does not parse is itself a finding: skipping it would let any figure in it pass.
    """
    if not _may_hold_findings(text, vocab):
        return []  # nothing to find; a syntax error here is ruff's to report
    lines = text.splitlines()
    skip, findings = generated_lines(lines, path)
    try:
        prose = sorted(set(_prose_lines(text)))
    except (SyntaxError, tokenize.TokenError) as exc:
        line = getattr(exc, "lineno", None) or 1
        return [*findings, Finding(path, line, f"does not parse: {exc}")]
    for number in prose:
        if number in skip or number > len(lines):
            continue
        findings += [
            Finding(path, number, what) for what in scan_line(lines[number - 1], vocab=vocab)
        ]
    return findings


def _walk(root: Path, suffix: str, under: Path) -> Iterator[Path]:
    """Files ending in ``suffix`` below ``under``, pruning skipped folders before descending.

    Pruning matters: a .venv holds tens of thousands of files that rglob would visit.
    """
    if not under.is_dir():
        return
    found = []
    for folder, dirs, files in os.walk(under):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")]
        found += [Path(folder, name) for name in files if name.endswith(suffix)]
    yield from sorted(found)


def scanned_files(root: Path) -> list[Path]:
    """The project's hand-written files to scan: what [tool.tether.scan] includes and does not
    exclude, minus the store, scratch, environments and the wholly rendered files (those are
    diffed against a fresh render instead)."""

    proj = project.get(root)
    rendered = {Path(p) for p in proj.render_files}
    out = []
    for suffix in (".md", ".py", ".j2"):
        for path in _walk(root, suffix, root):
            rel = path.relative_to(root)
            if rel in rendered or _under(path, (proj.store, proj.scratch)):
                continue
            # The templates are what every document is rendered from: scanned whatever the
            # include globs say (only an explicit exclude leaves one out).
            template = suffix == ".j2" and _under(path, (proj.templates,))
            if proj.scanned(rel.as_posix()) or (template and not proj.excluded(rel.as_posix())):
                out.append(path)
    return sorted(out)


def _under(path: Path, folders: Iterable[Path]) -> bool:
    return any(path.resolve().is_relative_to(f) for f in folders)


class ScanCache(Protocol):
    """Findings already known for a file's text under a vocabulary (``tether.checkcache``)."""

    def get(self, rel: str, text: str, vocabulary: str) -> list[Finding] | None: ...

    def put(self, rel: str, text: str, vocabulary: str, findings: list[Finding]) -> None: ...


def scan_file(text: str, rel: str, vocab: Vocabulary) -> list[Finding]:
    """The findings of one hand-written file, by its kind (its suffix)."""
    if rel.endswith(".py"):
        return scan_python(text, rel, vocab)
    if rel.endswith(".md"):
        return scan_markdown(text, rel, vocab)
    if rel.endswith(".j2"):
        return scan_template(text, rel, vocab)
    return []


def scan_tree(
    root: Path, skip: Iterable[Path] = (), cache: ScanCache | None = None
) -> list[Finding]:
    """Every stray figure or claim word in hand-written text under ``root``; ``cache`` gives
    the findings of a text already scanned under the same [tool.tether.scan] table."""
    skipped = {p.resolve() for p in skip}
    vocab = project_vocabulary(root)
    # What the vocabulary is made of: the table it is read from (the word lists are code).
    table = json.dumps(project.get(root).raw.get("scan", {}), sort_keys=True, default=str)
    findings: list[Finding] = []
    for path in scanned_files(root):
        if path.resolve() in skipped:
            continue
        rel = path.relative_to(root).as_posix()
        # A file the scan cannot read is an error, never a file passed unread (a figure typed
        # into a UTF-16 file would otherwise go unjudged) nor a finding a baseline could absorb.
        text = read_text(path, rel)
        known = cache.get(rel, text, table) if cache is not None else None
        if known is None:
            known = scan_file(text, rel, vocab)
            if cache is not None:
                cache.put(rel, text, table, known)
        findings += known
    return findings


# -- the baseline: adopting tether on a repository that already has figures in its prose ------

DEFAULT_BASELINE = "tether-scan-baseline.json"
BASELINE_SCHEMA = "tether.scan-baseline/1"


def baseline_path(root: Path) -> Path:
    """[tool.tether.scan] baseline (relative to the root), default DEFAULT_BASELINE."""

    value = project.get(root).raw.get("scan", {}).get("baseline", DEFAULT_BASELINE)
    if not isinstance(value, str) or not value:
        raise UsageError("[tool.tether.scan] baseline must be a path")
    return root / value


def _line_text(root: Path, finding: Finding, cache: dict[str, list[str]]) -> str:
    if finding.path not in cache:
        try:
            text = (root / finding.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        cache[finding.path] = text.splitlines()
    lines = cache[finding.path]
    return lines[finding.line - 1].strip() if 0 < finding.line <= len(lines) else ""


def _baseline_keys(root: Path, findings: Iterable[Finding]) -> list[tuple[str, str, str]]:
    """Each finding as (path, what, the line's text): a line moving up or down keeps its
    entry, an edited line is new."""
    cache: dict[str, list[str]] = {}
    return [(f.path, f.what, _line_text(root, f, cache)) for f in findings]


def write_baseline(root: Path, findings: Iterable[Finding]) -> Path:
    """Record ``findings`` (scan findings) as the baseline; returns the file written."""

    keys = sorted(_baseline_keys(root, findings))
    doc = {
        "schema": BASELINE_SCHEMA,
        "about": "scan findings that predate adopting tether; `tether check` reports only "
        "new ones. Regenerate with `tether check --baseline`.",
        "findings": [{"path": p, "what": w, "text": t} for p, w, t in keys],
    }
    path = baseline_path(root)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def apply_baseline(root: Path, findings: list[Finding]) -> list[Finding]:
    """``findings`` less those the baseline records (each entry absorbs one finding)."""

    path = baseline_path(root)
    if not path.is_file():
        return findings
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        entries = Counter((e["path"], e["what"], e["text"]) for e in doc["findings"])
        if doc.get("schema") != BASELINE_SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not a tether scan baseline ({exc})") from None
    out = []
    for finding, key in zip(findings, _baseline_keys(root, findings), strict=True):
        if entries[key] > 0:
            entries[key] -= 1
        else:
            out.append(finding)
    return out
