"""The constrained sampler's end game: every row finishes as a valid workflow, inside
``max_new_tokens`` and the call budget (``rollout.constrained: grammar``, docs/CONSTRAINED.md).

The workflow grammar bounds neither the length of a sample nor its worst-case executor calls
(a context-free grammar counts calls only with rules per count, too slow to sample with). So,
row by row and before each token, :class:`EndGame` asks :func:`flowgrpo.dsl.closing.
shortest_closing` how the text written so far can be finished at least cost (tokens, calls).
Far from both limits it does nothing. Near one, it keeps only the tokens after which a finish
still fits (``near_tokens`` / ``near_calls``: more than one token can add, and an operator counts
the calls its settings let it make, ``dsl.StaticLimits.op_calls``; a large allowed set,
i.e. free text inside an instruction, is left whole while one more token still leaves room for
the finish). When nothing else fits, it forces the finish token by token, end token included.

The restriction is part of the mask the row was sampled under (it edits the packed bits the
rollout stores), so the update scores exactly the distribution sampled from: a forced token has
probability 1 and no gradient.
"""

from __future__ import annotations

import logging

import torch

from flowgrpo.dsl.closing import Closing, PrefixScan, scan_prefix, shortest_closing
from flowgrpo.dsl.operators import default_table
from flowgrpo.dsl.validate import heavy_operators
from flowgrpo.trainer.loop.constrain import tokenizer_cache, unpack_allowed

logger = logging.getLogger(__name__)

MAX_CHECKED = 512  # allowed sets up to this size are checked token by token


def _signed(word: int) -> int:
    """An unsigned 32-bit word as the int32 the packed masks hold."""
    return word - (1 << 32) if word >= 1 << 31 else word


def _words(token_ids: list[int]) -> dict[int, int]:
    """The packed words (unsigned) that hold exactly ``token_ids``: word index -> bits."""
    words: dict[int, int] = {}
    for t in token_ids:
        words[t // 32] = words.get(t // 32, 0) | (1 << (t % 32))
    return words


def only(bits_W: torch.Tensor, token_ids: list[int]) -> None:
    """Set the packed mask ``bits_W`` (in place) to allow exactly ``token_ids``."""
    bits_W.zero_()
    for w, value in _words(token_ids).items():
        bits_W[w] = _signed(value)


class EndGame:
    """Keeps each constrained row finishable; see the module docstring.

    Counters (per sampling call): ``forced_rows`` (rows whose end was forced),
    ``filtered`` (positions where tokens were removed to keep a finish in reach), ``touched``
    (rows with either) and ``unclosable`` (rows the end game could not help: a prefix it
    cannot scan or finish, left to the grammar alone; expected 0).
    """

    def __init__(self, tokenizer, max_new_tokens, domains, operators, limits, eos_id: int,
                 near_tokens: int | None = None, near_calls: int | None = None,
                 vocab_size: int | None = None):  # fmt: skip
        self.tokenizer, self.max_new_tokens, self.domains = tokenizer, max_new_tokens, domains
        self.classes = token_classes(tokenizer, vocab_size or len(tokenizer))
        self._decode = text_decoder(tokenizer)
        self.operators, self.limits, self.eos_id = operators, limits, eos_id
        self._closings: dict[tuple[str, str], Closing | None] = {}  # rows share prefixes
        self._accepted: dict[tuple[str, str], bool] = {}  # the grammar takes text + its finish
        self._scans: dict[tuple[str, str], PrefixScan | None] = {}
        self._ids: dict[str, list[int]] = {}  # a finish's tokens: few finishes, many rows
        table = operators if operators is not None else default_table()
        # one token adds at most about two operators' calls (a name that opens a parallel
        # block's second branch): 3 when each counts one, more where one counts several
        heaviest = max(heavy_operators(table, limits).values(), default=1)
        self.near_calls = near_calls if near_calls is not None else 1 + 2 * heaviest
        # one token can lengthen the finish by about two operator names (a parallel block
        # opened where an operand was due: "G" becomes "G, G]") and a few separators
        longest = max(self._ntok(n) for n in table)
        self.near_tokens = near_tokens if near_tokens is not None else 2 * longest + 8
        self.queue: dict[int, list[int]] = {}
        self.forced_rows: set[int] = set()
        self.filtered = 0
        self.touched: set[int] = set()
        self.unclosable: set[int] = set()

    def _tokens(self, text: str) -> list[int]:
        if text not in self._ids:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
            self._ids[text] = list(ids)
        return self._ids[text]

    def _ntok(self, text: str) -> int:
        return len(self._tokens(text))

    def _text(self, ids: list[int]) -> str:
        return self._decode(ids)

    def _closing(self, row: int, text: str, start: PrefixScan | None = None) -> Closing | None:
        """The shortest finish of ``text``; ``start``: the scan of the row's text before its
        last token (every candidate token of a position goes on from the same one)."""
        key = (self.domains[row], text)
        if key not in self._closings:
            self._closings[key] = shortest_closing(
                text, key[0], self.operators, self.limits, self._ntok, start=start
            )
        return self._closings[key]

    def _prefix_scan(self, row: int, text: str) -> PrefixScan | None:
        key = (self.domains[row], text)
        if key not in self._scans:
            self._scans[key] = scan_prefix(text, key[0], self.operators, self.limits)
        return self._scans[key]

    def _need(self, closing: Closing, text: str) -> int:
        """Positions a finish of ``text`` takes: its tokens, the end token, and one more when
        ``text`` ends inside a multi-byte character (a byte-level token left it incomplete, and
        the grammar takes the closing quote only once the character is whole)."""
        return self._ntok(closing.text) + 1 + text.endswith(PARTIAL)

    def _fits(self, closing: Closing | None, left: int, text: str) -> bool:
        """A finish of ``closing`` fits in ``left`` positions after ``text``."""
        return (
            closing is not None
            and closing.calls <= self.limits.max_calls
            and self._need(closing, text) <= left
        )

    def _fits_after(self, row: int, ids: list[int], token: int, left: int, matcher,
                    start: PrefixScan | None = None) -> bool:  # fmt: skip
        """A finish still fits in ``left`` positions once ``token`` follows ``ids``; at the call
        budget, the grammar must also take ``token``, that finish and the end token (the
        shortest closing is the DSL's; the constrained grammar is stricter in places, e.g. no
        loop count after an ensemble, and a finish it refuses there would cost a call over)."""
        text = self._text([*ids, token])
        closing = self._closing(row, text, start)
        if not self._fits(closing, left, text):
            return False
        if closing.calls < self.limits.max_calls:  # below the budget a finish the grammar
            return True  # refuses costs at most one more call (checked again next token)
        key = (self.domains[row], text)  # the grammar reads text: the same text, the same answer
        if key not in self._accepted:
            sequence = [token, *self._tokens(closing.text), self.eos_id]
            # validate_tokens reads without consuming: no copy of the matcher per candidate
            self._accepted[key] = matcher.validate_tokens(sequence) == len(sequence)
        return self._accepted[key]

    def restrict(self, row: int, ids: list[int], matcher, bits_W: torch.Tensor) -> None:
        """Edit row ``row``'s packed mask ``bits_W`` for its next token, ``ids`` written so far."""
        if row in self.queue:
            only(bits_W, [self.queue[row].pop(0)])
            return
        left = self.max_new_tokens - len(ids)  # positions left, this one included
        text = self._text(ids)
        closing = self._closing(row, text)
        if closing is None:
            self.unclosable.add(row)
            return
        need = self._need(closing, text)
        # a loop count multiplies: the one token that can add many calls at once
        near_calls = closing.calls >= self.limits.max_calls - self.near_calls or "*" in text[-2:]
        if left > need + self.near_tokens and not near_calls:
            return
        allowed_V = unpack_allowed(bits_W, 32 * bits_W.shape[-1])
        start = self._prefix_scan(row, text)  # each candidate's text goes on from this one's
        if int(allowed_V.sum()) <= MAX_CHECKED:
            allowed = allowed_V.nonzero().flatten().tolist()
            keep = [
                t
                for t in allowed
                if t == self.eos_id or self._fits_after(row, ids, t, left - 1, matcher, start)
            ]
            if keep:
                if len(keep) < len(allowed):
                    self.filtered += 1
                    self.touched.add(row)
                    only(bits_W, keep)
                return
        elif need <= left - 1:  # a large set: one more token still leaves room for the finish,
            # unless it ends an instruction (a quote) and opens more than it closes, leaves a
            # character incomplete, or, near the call budget outside an instruction, adds
            # structure (an arrow, a branch, a loop count)
            outside = near_calls and not closing.text.startswith('"')
            risky = self._risky_allowed(allowed_V, outside)
            drop = [t for t in risky if not self._fits_after(row, ids, t, left - 1, matcher, start)]
            if drop:
                self.filtered += 1
                self.touched.add(row)
                forbid(bits_W, drop)
            return
        self._force(row, closing, matcher, bits_W)

    def _risky_allowed(self, allowed_V: torch.Tensor, outside: bool) -> list[int]:
        """The allowed tokens :func:`_risky` picks, from the tokenizer's precomputed classes
        (one pass over the vocabulary per tokenizer, not per position)."""
        quote_V, structure_V = self.classes
        n = allowed_V.shape[0]
        risky_V = quote_V[:n] | structure_V[:n] if outside else quote_V[:n]
        return (allowed_V & risky_V).nonzero().flatten().tolist()

    def _force(self, row: int, closing: Closing, matcher, bits_W: torch.Tensor) -> None:
        ids = [*self._tokens(closing.text), self.eos_id]
        if matcher.validate_tokens(ids) != len(ids):
            logger.debug("end game: the grammar rejects the finish %r", closing.text)
            self.unclosable.add(row)
            return
        self.forced_rows.add(row)
        self.touched.add(row)
        self.queue[row] = ids[1:]
        only(bits_W, ids[:1])


#: Characters of the tokens that can add operator calls to a finished unit: an arrow (`->`), a
#: branch (`,`), a loop count (`*` and its digits), a block or group, a conditional.
_STRUCTURE = frozenset("->,*[(?:0123456789")


#: What a byte-level token that ends inside a multi-byte UTF-8 character decodes to.
PARTIAL = "\ufffd"


def _risky(piece: str, near_calls: bool) -> bool:
    """Whether a token of a large allowed set is checked: a quote always (it ends an
    instruction), a part of a character (it needs another token before the quote can follow),
    a structural character when near the call budget outside an instruction."""
    return '"' in piece or PARTIAL in piece or (near_calls and not _STRUCTURE.isdisjoint(piece))


def token_classes(tokenizer, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(quote_V, structure_V): bool over ``vocab_size`` rounded up to whole mask words, whether
    each token's decoded piece holds a quote or part of a character (:func:`_risky` always
    checks it), or a structural character (checked near the call budget). Built once per
    tokenizer (one batched decode of the vocabulary); ids the tokenizer lacks are in neither."""
    key = ("endgame classes", vocab_size)
    cache = tokenizer_cache(tokenizer)
    if key not in cache:
        width = 32 * -(-vocab_size // 32)
        quote_V = torch.zeros(width, dtype=torch.bool)
        structure_V = torch.zeros(width, dtype=torch.bool)
        pieces = tokenizer.batch_decode([[t] for t in range(min(vocab_size, len(tokenizer)))])
        quote_V[: len(pieces)] = torch.tensor([_risky(p, False) for p in pieces], dtype=torch.bool)
        structure_V[: len(pieces)] = torch.tensor(
            [not _STRUCTURE.isdisjoint(p) for p in pieces], dtype=torch.bool
        )
        cache[key] = (quote_V, structure_V)
    return cache[key]


def forbid(bits_W: torch.Tensor, token_ids: list[int]) -> None:
    """Clear the bits of ``token_ids`` in the packed mask ``bits_W`` (in place)."""
    for w, cleared in _words(token_ids).items():
        bits_W[w] = _signed((int(bits_W[w]) & 0xFFFFFFFF) & ~cleared)


def unpack_row(bits_W: torch.Tensor) -> list[int]:
    """Token ids allowed by one packed mask row."""
    return unpack_allowed(bits_W, 32 * bits_W.shape[-1]).nonzero().flatten().tolist()


def text_decoder(tokenizer):
    """``ids -> text`` as ``tokenizer.decode(ids, skip_special_tokens=True)``: through the fast
    tokenizer's Rust decoder when transformers would add nothing to it (no clean-up of spaces),
    since the end game decodes every candidate token's row and transformers' wrapper (argument
    conversion over the whole list) cost several times the decode itself there."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)
    return lambda ids: backend.decode(ids, skip_special_tokens=True)
