"""reasoning-gym in a child process: generating entries, and scoring answers with a time limit.

A dataset's ``score_answer`` runs on text the policy wrote, and several parse it with
sympy or ``eval``: ``9**9**9**9`` or ``1e999999`` in an answer keeps some of them busy
for minutes (measured with reasoning-gym 0.1.25: string_insertion, n_queens, the
integration and polynomial datasets, countdown, puzzle24), and some swallow every
exception, a timeout's included. So scoring runs in one long-lived child process per
parent process (`shared_scorer`), which regenerates the entry from (dataset, config,
seed, size, index) and answers one JSON line per request.

The child also generates the entries the tasks are made of, with a fixed
``PYTHONHASHSEED``: some datasets' entries depend on string hashing (0.1.25's
polynomial_multiplication draws different polynomials in each process otherwise), so
generating and scoring in one process with one hash seed is what makes a seed's tasks
the same in every run and each answer scored against the entry its task was made from.

Protects against: an answer that makes the scorer hang (it is killed after
``timeout_s`` and restarted on the next request), raise, print to stdout, exhaust
memory (``RLIMIT_AS``) or crash the interpreter. Each of these scores the answer 0
with a reason; none is an infra failure, because the answer caused it. Only a child
that cannot start (reasoning-gym missing or broken) is `InfraError`.

And against an answer that runs as code. Some scorers ``eval`` the answer (0.1.25:
n_queens, spiral_matrix, string_insertion, binary_matrix, for partial credit on a
Python literal) or hand it to sympy's ``parse_expr``, which evaluates it too (the
integration and polynomial datasets, countdown, puzzle24): code in an answer could
write a forged reply line of its own and score 1. While a scorer runs
(`_answer_as_data`), ``eval`` in reasoning-gym's modules evaluates only text of the
entry itself (bitwise_arithmetic evaluates its problem) and reads anything else as a
literal (`ast.literal_eval`), and sympy evaluates parsed text only when every name it
uses is a math name (`MATH_NAMES`) or one of the scorer's own symbols; anything else
scores 0.

Does not protect against: a scorer that is wrong (that is the dataset's business;
see the hedge check in `agentenv.envs.adapters.reasoning_gym`), or a machine so loaded that an
honest answer's scoring runs past the limit (it then scores 0: raise ``timeout_s``).

This file is also the child's program (``python -P this_file``): the child part uses
the standard library and reasoning-gym only, so it starts without agentenv.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import contextlib
import importlib
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

__all__ = ["ScoreReply", "Scorer", "shared_scorer"]

GENERATE_TIMEOUT_S = 600.0
"""Generating entries is not policy input; a few datasets take about 0.5 s an entry."""
START_TIMEOUT_S = 120.0
"""Importing reasoning-gym takes about 1.5 s on an idle machine; a loaded one may take far longer."""
_CACHED_DATASETS = 64
_CACHED_ENTRIES = 4096
MATH_NAMES = frozenset(
    """Integer Float Rational Symbol Function factorial factorial2 binomial gamma beta
    sin cos tan cot sec csc asin acos atan acot asec acsc atan2 sinh cosh tanh coth sech csch
    asinh acosh atanh exp log ln sqrt cbrt root Abs sign floor ceiling re im arg conjugate
    erf erfc erfi Ei Si Ci li LambertW Heaviside DiracDelta Max Min Mod Add Mul Pow
    Integral Derivative Sum Product Limit Piecewise Eq Ne Lt Le Gt Ge And Or Not
    pi E I oo zoo nan EulerGamma GoldenRatio Catalan""".split()
)
"""The names sympy-parsed answer text may use, besides the scorer's own symbols: what sympy's
parser makes of numbers, symbols and ``3!``, and the functions and constants of answers."""


class ScoreReply:
    """The child's answer to one request: the score, the decoys' and the parts' scores, or why neither."""

    __slots__ = ("decoys", "error", "parts", "score")

    def __init__(
        self, score: float | None, decoys: list[float], error: str | None, parts: Sequence[float] = ()
    ) -> None:
        self.score = score
        self.decoys = decoys
        self.error = error
        self.parts = list(parts)


class Scorer:
    """A client of one scoring child. Thread-safe: requests are serialised."""

    def __init__(self, *, memory_limit_bytes: int = 4 << 30) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._lock = threading.Lock()

    def score(
        self,
        request: dict[str, Any],
        *,
        timeout_s: float,
    ) -> ScoreReply:
        """Score ``request`` (keys: dataset, config, seed, size, index, answer, decoys:
        [[seed, index], ...], and parts: answers scored against the entry itself; decoys
        and parts are scored only when the answer scores above 0)."""
        with self._lock:
            # The entries first, on their own clock: a child restarted after a hostile
            # answer (or one whose cache let them go) regenerates them, which may take
            # longer than an answer may (knight_swap: 6 s an entry). Timed with the
            # answer, every later honest answer scored 0, and killed the child again.
            prepared = self._generate({**_entry_keys(request), "op": "prepare"}, "preparing the answer's entries")
            if prepared.get("error") is not None:
                from agentenv.core.errors import InfraError

                raise InfraError(f"reasoning-gym could not make the entry to score against: {prepared['error']}")
            try:
                reply = self._exchange(request, timeout_s)
            except (BrokenPipeError, EOFError):
                code = self._stop()
                return ScoreReply(None, [], f"the scoring process died on this answer (exit code {code})")
            except TimeoutError:
                self._stop()
                return ScoreReply(None, [], f"scoring this answer ran past {timeout_s:g} s")
        try:
            data = json.loads(reply)
            return ScoreReply(data["score"], list(data["decoys"]), data["error"], list(data["parts"]))
        except (ValueError, KeyError, TypeError) as e:  # not the child's protocol: restart it
            with self._lock:
                self._stop()
            return ScoreReply(None, [], f"the scoring process answered out of protocol: {e}")

    def entries(self, request: dict[str, Any], *, timeout_s: float = GENERATE_TIMEOUT_S) -> list[dict[str, Any]]:
        """The question and answer of entries ``request["indices"]`` of a dataset (keys:
        dataset, config, seed, size, indices). `ValueError` when the dataset cannot make them."""
        with self._lock:
            data = self._generate({**request, "op": "entries"}, "generating entries", timeout_s)
        if data.get("error") is not None:
            raise ValueError(data["error"])
        return list(data["entries"])

    def close(self) -> None:
        with self._lock:
            self._stop()

    # -- internals ------------------------------------------------------------------

    def _generate(self, request: dict[str, Any], doing: str, timeout_s: float = GENERATE_TIMEOUT_S) -> dict[str, Any]:
        """The child's reply to a request that generates entries (no answer in it); the
        caller holds the lock. A child that died since its last reply gets one fresh
        successor; a failure past that is `InfraError`: no answer played a part in it."""
        from agentenv.core.errors import InfraError

        for attempt in range(2):
            try:
                return dict(json.loads(self._exchange(request, timeout_s)))
            except (BrokenPipeError, EOFError, TimeoutError, ValueError) as e:
                code = self._stop()
                if attempt == 0 and isinstance(e, (BrokenPipeError, EOFError)):
                    continue
                raise InfraError(
                    f"the reasoning-gym process failed {doing} ({type(e).__name__}, exit code {code})"
                ) from None
        raise AssertionError("unreachable")

    def _exchange(self, request: dict[str, Any], timeout_s: float) -> bytes:
        """One request line to the child, its reply line back; the caller holds the lock.
        The line is ASCII: ``json.dumps`` escapes the answer's characters."""
        proc = self._started()
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        return self._read_line(proc, timeout_s)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        from agentenv.core.errors import InfraError

        self._stop()
        self._proc = proc = subprocess.Popen(
            [sys.executable, "-P", __file__, str(self.memory_limit_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # datasets print to stdout and stderr; the protocol is the dup'd stdout
            env={**os.environ, "PYTHONHASHSEED": "0"},  # see the module docstring
            start_new_session=True,  # a Ctrl-C in the parent's terminal is the parent's to handle
        )
        try:
            ready = self._read_line(proc, START_TIMEOUT_S)
        except (EOFError, TimeoutError) as e:
            code = self._stop()
            raise InfraError(
                f"the reasoning-gym scoring process did not start ({type(e).__name__}, exit code {code}); "
                f'check that `{sys.executable} -c "import reasoning_gym"` works'
            ) from None
        if ready != b'{"ready": true}':
            self._stop()
            raise InfraError(f"the reasoning-gym scoring process said {ready[:200]!r} instead of ready")
        return proc

    def _read_line(self, proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _stop(self) -> int | None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        return proc.wait()


def _entry_keys(request: dict[str, Any]) -> dict[str, Any]:
    """What names a scoring request's entry and decoys, the answer left out."""
    return {k: request[k] for k in ("dataset", "config", "seed", "size", "index", "decoys")}


_shared: tuple[int, Scorer] | None = None
_shared_lock = threading.Lock()


def shared_scorer() -> Scorer:
    """This process's scorer (a forked child gets its own; the child process starts on first use,
    and is killed when this process exits, even if it is busy scoring)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            _shared = (os.getpid(), Scorer())
            atexit.register(_shared[1].close)
        return _shared[1]


# -- the child ------------------------------------------------------------------------


class _Child:
    """Datasets and entries cached by what generates them."""

    def __init__(self) -> None:
        import reasoning_gym
        from reasoning_gym import utils
        from reasoning_gym.dataset import ProceduralDataset

        ProceduralDataset.score_answer = _exact
        real_decimal = utils.compute_decimal_reward
        utils.compute_decimal_reward = lambda answer, oracle_answer, strip_commas=True: float(
            real_decimal(answer, oracle_answer, strip_commas) == 1.0
        )
        from reasoning_gym.factory import DATASETS

        for name in _ALL_OR_NOTHING:
            if name in DATASETS:  # a reasoning-gym without the dataset has nothing to fix
                DATASETS[name][0].score_answer = _all_or_nothing(DATASETS[name][0].score_answer)
        for name, scorer in _REPLACED.items():
            if name in DATASETS:
                DATASETS[name][0].score_answer = scorer
        self._create = reasoning_gym.create_dataset
        self._datasets: OrderedDict[tuple[str, str, int, int], Any] = OrderedDict()
        self._entries: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()

    def entry(self, name: str, config: dict[str, Any], seed: int, size: int, index: int) -> tuple[Any, dict[str, Any]]:
        key = (name, json.dumps(config, sort_keys=True), seed, size)
        dataset = self._datasets.get(key)
        if dataset is None:
            if name == "composite" and "datasets" in config:  # it reads its parts as DatasetSpec objects
                from reasoning_gym.composite import DatasetSpec

                config = {**config, "datasets": [DatasetSpec(**part) for part in config["datasets"]]}
            dataset = self._datasets[key] = self._create(name, seed=seed, size=size, **config)
            if len(self._datasets) > _CACHED_DATASETS:
                self._datasets.popitem(last=False)
        entry = self._entries.get((*key, index))
        if entry is None:
            entry = self._entries[(*key, index)] = dataset[index]
            if len(self._entries) > _CACHED_ENTRIES:
                self._entries.popitem(last=False)
        return dataset, entry

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "entries":
            return self.generate(request)
        if request.get("op") == "prepare":
            return self.prepare(request)
        return self.score(request)

    def prepare(self, request: dict[str, Any]) -> dict[str, Any]:
        """Make (or find cached) the entry an answer will be scored against and its decoys."""
        name, config, size = request["dataset"], request["config"], request["size"]
        try:
            for seed, index in [(request["seed"], request["index"]), *request["decoys"]]:
                self.entry(name, config, seed, size, index)
        except Exception as e:  # noqa: BLE001 - a config that validates but cannot generate
            return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        return {"error": None}

    def generate(self, request: dict[str, Any]) -> dict[str, Any]:
        name, config, seed, size = request["dataset"], request["config"], request["seed"], request["size"]
        entries = []
        for index in request["indices"]:
            try:
                _, entry = self.entry(name, config, seed, size, index)
                answer = entry.get("answer")
                entries.append({"question": str(entry["question"]), "answer": None if answer is None else str(answer)})
            except Exception as e:  # noqa: BLE001 - a config that validates but cannot generate
                return {"entries": [], "error": f"generating entry {index} failed: {type(e).__name__}: {e}"}
        return {"entries": entries, "error": None}

    def score(self, request: dict[str, Any]) -> dict[str, Any]:
        name, config, size = request["dataset"], request["config"], request["size"]
        dataset, entry = self.entry(name, config, request["seed"], size, request["index"])
        try:
            with _answer_as_data(entry):  # entries are generated outside it: their code may eval
                score = float(dataset.score_answer(request["answer"], entry))
        except Exception as e:  # noqa: BLE001 - the answer made the dataset's scorer fail
            return {"score": None, "decoys": [], "parts": [], "error": f"{type(e).__name__}: {str(e)[:300]}"}
        decoys: list[float] = []
        parts: list[float] = []
        if score > 0:
            for seed, index in request["decoys"]:
                other, decoy = self.entry(name, config, seed, size, index)
                decoys.append(_score_or_zero(other, request["answer"], decoy))
            parts = [_score_or_zero(dataset, part, entry) for part in request.get("parts", ())]
        return {"score": score, "decoys": decoys, "parts": parts, "error": None}


@contextlib.contextmanager
def _answer_as_data(entry: Any) -> Iterator[None]:
    """While a scorer runs on ``entry``: ``eval`` in reasoning-gym's modules evaluates the
    entry's own text only and reads anything else as a literal, and sympy's parser
    evaluates math names only (see the module docstring)."""
    trusted = set(_strings(entry))

    def entry_eval(source: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(source, str) and source in trusted:
            return builtins.eval(source, *args, **kwargs)
        return ast.literal_eval(source)

    patched = []
    for name, module in list(sys.modules.items()):
        if (name == "reasoning_gym" or name.startswith("reasoning_gym.")) and isinstance(module, types.ModuleType):
            if "eval" not in vars(module):
                module.eval = entry_eval  # type: ignore[attr-defined]  # the module's name shadows the builtin
                patched.append(module)
    parser = sys.modules.get("sympy.parsing.sympy_parser")
    original = getattr(parser, "eval_expr", None)
    if parser is not None and original is not None:
        parser.eval_expr = _math_only(original)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            del module.eval
        if parser is not None and original is not None:
            parser.eval_expr = original  # type: ignore[attr-defined]


def _score_or_zero(dataset: Any, answer: str, entry: dict[str, Any]) -> float:
    """``dataset``'s score of ``answer`` for ``entry`` (a decoy or a part of the answer), 0 where it fails."""
    try:
        with _answer_as_data(entry):
            return float(dataset.score_answer(answer, entry))
    except Exception:  # noqa: BLE001 - an answer no decoy accepts
        return 0.0


def _exact(self: Any, answer: Any, entry: dict[str, Any]) -> float:
    """reasoning-gym's default ``score_answer`` (33 datasets of 0.1.25 use it, composite's
    parts too) without its partial credit, ``len(reference) / len(answer)`` for an answer
    that holds the reference: it paid ``-42`` for 42 two thirds, so a policy unsure of a
    sign gained by always writing a minus, and no decoy check sees that (the decoys hold
    other numbers). An answer scores 1 when it is the reference, else 0. The same credit
    is taken out of ``utils.compute_decimal_reward`` (chain_sum, products), which keeps
    its equality of values ("+01,000.00" is 1000)."""
    return 1.0 if isinstance(answer, str) and answer and answer == entry["answer"] else 0.0


_PLAIN_NUMBER = re.compile(r"[-+]?(\d{1,64}(\.\d{0,64})?|\.\d{1,64})([eE][-+]?\d{1,3})?(/\d{1,64})?")


def _within_tolerance(self: Any, answer: Any, entry: dict[str, Any], tol: float = 1e-4) -> float:
    """coin_flip's ``score_answer`` (0.1.25) without its partial credit, the share of the
    shorter of the two numbers' digits that open both: it paid 1.0 to ``0.3`` for 0.3125 (and to
    ``0`` for any probability below 1), so one significant digit solved most tasks. An
    answer scores 1 when its value (a decimal or a fraction) is within ``tol`` of the
    reference's and within 1% of it, so ``0`` is not the answer to a probability below ``tol``,
    else 0. Exponents have at most three digits: ``Fraction("1e999999999")`` builds the power
    before anything can refuse it."""
    if not isinstance(answer, str) or not _PLAIN_NUMBER.fullmatch(answer.replace(",", "").strip()):
        return 0.0
    try:
        value = float(Fraction(answer.replace(",", "")))
        reference = float(Fraction(str(entry["answer"]).replace(",", "")))
    except (ValueError, ZeroDivisionError, OverflowError):
        return 0.0
    return 1.0 if abs(value - reference) <= min(tol, 0.01 * abs(reference)) or value == reference else 0.0


def _all_or_nothing(score_answer: Callable[..., float]) -> Callable[..., float]:
    """A scorer that pays 1 where the dataset's own pays exactly 1, else 0: its partial
    credit went to answers that do no work (measured with 0.1.25, 24 tasks each, through
    the env): time_intervals paid 0.95 to "0 days" for 5 days (1 - difference / the
    largest difference), rectangle_count 0.22 on average to "1" (closeness), game_of_life
    0.96 to a grid of dead cells (the share of cells right), figlet_font 0.1 a letter in
    place; manipulate_matrix, tsumego and codeio paid ``len(reference) / len(answer)`` to
    an answer holding the reference, so two candidates earned 0.5 (the decoys see that only
    when the second is a decoy's answer); spell_backward paid 0.93 to the answer written
    twice, and 1.0 where its per-letter float sum came out above 1."""

    def scored(self: Any, answer: Any, entry: dict[str, Any]) -> float:
        return 1.0 if score_answer(self, answer, entry) == 1.0 else 0.0

    return scored


def _whole_grid(self: Any, answer: Any, entry: dict[str, Any]) -> float:
    """sudoku, mini_sudoku and futoshiki without their partial credit, the share of cells
    that match: the puzzle's own clues with each blank written as 1 earned 0.54 (sudoku),
    0.48 (mini_sudoku), 0.23 (futoshiki) on average, with nothing solved. An answer scores 1
    when its rows of digits (the datasets' reading: other characters ignored) are the
    solution's, and no more, else 0; the datasets paid a right grid in another layout 0.9,
    and read the first grid only, so two candidate grids, one under the other, scored 1
    when the first was right."""
    if not isinstance(answer, str):
        return 0.0
    solution = entry["metadata"]["solution"]
    rows = [[int(c) for c in line if c in "123456789"] for line in answer.split("\n")]
    rows = [row for row in rows if len(row) == len(solution[0])]  # the datasets skip other lines
    return 1.0 if rows == solution else 0.0


def _same_words(self: Any, answer: Any, entry: dict[str, Any]) -> float:
    """letter_jumble without its credit per word in place, capped at 1: the sentence with
    words added after it scored 1.0. An answer scores 1 when its words are the reference's
    (case and spacing aside, as the dataset compared), else 0."""
    return 1.0 if isinstance(answer, str) and answer.lower().split() == entry["answer"].lower().split() else 0.0


def _same_list(self: Any, answer: Any, entry: dict[str, Any]) -> float:
    """word_sorting without its credit per word in place: the sorted list with items
    added after it scored 1.0, and the words as given, unsorted, 0.2 or more (0.24 on
    average). An answer scores 1 when it is the sorted list, else 0."""
    if not isinstance(answer, str):
        return 0.0
    return 1.0 if [w.strip() for w in re.split(r",\s*", answer)] == entry["metadata"]["sorted_words"] else 0.0


def _same_numbers(self: Any, answer: Any, entry: dict[str, Any]) -> float:
    """number_sorting without its tolerance of 1 on each number: the sorted numbers rounded
    to integers scored 1.0, and so did ``[17.0, 17.0]`` for 17.0 and 17.3. An answer scores 1
    when it is a list of the sorted numbers' values (``"17"`` is 17.0), else 0."""
    if not isinstance(answer, str):
        return 0.0
    try:
        given = json.loads(answer.replace("'", '"'))
        expected = json.loads(entry["answer"].replace("'", '"'))
        same = isinstance(given, list) and [float(x) for x in given] == [float(x) for x in expected]
    except (ValueError, TypeError):
        return 0.0
    return 1.0 if same else 0.0


_ALL_OR_NOTHING = (
    *("codeio", "figlet_font", "game_of_life", "manipulate_matrix"),
    *("rectangle_count", "spell_backward", "time_intervals", "tsumego"),
)
_REPLACED: dict[str, Callable[..., float]] = {
    **dict.fromkeys(["futoshiki", "mini_sudoku", "sudoku"], _whole_grid),
    "coin_flip": _within_tolerance,
    "letter_jumble": _same_words,
    "number_sorting": _same_numbers,
    "word_sorting": _same_list,
}
"""Datasets (0.1.25) whose scorers paid wrong answers: the first pay only their own 1.0, the others are replaced."""


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _math_only(evaluate: Callable[..., Any]) -> Callable[..., Any]:
    def eval_expr(code: Any, local_dict: Any, global_dict: Any) -> Any:
        compiled = code if isinstance(code, types.CodeType) else compile(str(code), "<answer>", "eval")
        allowed = MATH_NAMES | set(local_dict or ())
        bad = sorted({n for n in compiled.co_names if n not in allowed})
        if bad or any(isinstance(c, types.CodeType) for c in compiled.co_consts):
            raise ValueError(f"the answer is not a math expression (it uses {', '.join(bad)[:200] or 'a function'})")
        return evaluate(compiled, local_dict, global_dict)

    return eval_expr


def _serve(memory_limit_bytes: int) -> None:
    import resource

    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # what datasets print goes where stderr goes, never into the protocol
    sys.stdout = sys.stderr
    if memory_limit_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    child = _Child()
    with contextlib.suppress(ImportError):  # imported now, so that _answer_as_data finds it to guard
        importlib.import_module("sympy.parsing.sympy_parser")
    out.write(b'{"ready": true}\n')
    for line in sys.stdin.buffer:
        try:
            reply = child.handle(json.loads(line))
        except Exception as e:  # noqa: BLE001 - generating the entry failed: say so, keep serving
            reply = {"score": None, "decoys": [], "parts": [], "error": f"{type(e).__name__}: {str(e)[:300]}"}
        out.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
