"""svod's generator in plain Python (``svod.random``): Philox4x32-10 against Random123's published answers, what
a draw makes of its words, and the process generator's key and launch count."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import svod
from svod.errors import SvodError
from svod.random import KEY_VARIABLE, LAUNCH_VARIABLE, Launch, ProcessGenerator
from svod.random.philox import (
    PlainRandom,
    bounded,
    cos_two_pi,
    log,
    philox4x32,
    uniform_double,
    uniform_single,
)

KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
"""Random123's known-answer vectors for Philox4x32-10 (its kat_vectors; TensorFlow's stateful random tests
quote the same three): counter, key, the four words."""


@pytest.mark.parametrize(("counter", "key", "words"), KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers(counter, key, words):
    assert philox4x32(counter, key) == words


def test_philox_on_arrays_computes_each_block_as_on_ints():
    rng = np.random.default_rng(5)
    counters = [rng.integers(0, 1 << 32, 64, dtype=np.uint64) for _ in range(4)]
    keys = [rng.integers(0, 1 << 32, 64, dtype=np.uint64) for _ in range(2)]
    blocks = philox4x32(counters, keys)
    for k in range(64):
        one = philox4x32([int(c[k]) for c in counters], [int(c[k]) for c in keys])
        assert tuple(int(b[k]) for b in blocks) == one
    arrays = philox4x32([np.array([c], np.uint64) for c, _, _ in [KNOWN_ANSWERS[2]] for c in c],
                        [np.array([k], np.uint64) for k in KNOWN_ANSWERS[2][1]])
    assert tuple(int(a[0]) for a in arrays) == KNOWN_ANSWERS[2][2]


def test_a_uniform_uses_53_bits_and_its_float32_form_cuts_it_to_24():
    assert uniform_double(0, 0) == 0.0
    assert uniform_double(0xFFFFFFFF, 0xFFFFFFFF) == 1.0 - 2.0 ** -53  # never 1
    assert uniform_single(0xFFFFFFFF) == np.float32(1.0 - 2.0 ** -24)
    rng = np.random.default_rng(1)
    for w0, w1 in rng.integers(0, 1 << 32, (200, 2), dtype=np.uint64).tolist():
        double, single = uniform_double(w0, w1), uniform_single(w0)
        assert float(single) == np.floor(double * 2 ** 24) / 2 ** 24  # cut, not rounded: below 1 too


@pytest.mark.parametrize(("kind", "bits"), [(np.float64, 53), (np.float32, 24)])
def test_the_written_out_log_and_cosine_are_within_a_few_ulps(kind, bits):
    """On the values draws give them (multiples of 2**-bits), against Python's math in float64."""
    steps = [int(k) for k in np.random.default_rng(bits).integers(1, 1 << bits, 5000)] + [1, 2, (1 << bits) - 1]
    eps = float(np.finfo(kind).eps)
    for k in steps:
        t = kind(k * 2.0 ** -bits)
        assert abs(float(log(t)) - math.log(float(t))) <= 2 * eps * abs(math.log(float(t)))
        assert abs(float(cos_two_pi(t)) - math.cos(2 * math.pi * float(t))) <= 4 * eps
    assert log(kind(1.0)) == 0.0 and type(log(kind(0.5))) is kind
    assert [float(cos_two_pi(kind(q / 4))) for q in range(4)] == [1.0, 0.0, -1.0, 0.0]


@pytest.mark.parametrize("span", [1, 2, 3, 7, 10, 1000, 12345, (1 << 31) + 1, (1 << 32) - 1, 1 << 32])
def test_bounded_integers_stay_in_their_span_and_follow_lemire(span):
    rng = np.random.default_rng(span % 1000)
    for words in rng.integers(0, 1 << 32, (300, 4), dtype=np.uint64).tolist():
        value = bounded(words, span)
        assert 0 <= value < span
        threshold = (1 << 32) % span
        accepted = [w for w in words[:3] if (w * span) & 0xFFFFFFFF >= threshold]
        assert value == ((accepted[0] if accepted else words[3]) * span) >> 32
    assert bounded([5, 6, 7, 8], 0) == bounded([5, 6, 7, 8], (1 << 32) + 1) == 0


def test_bounded_integers_are_exactly_uniform_over_every_accepted_word():
    """Over every low product of one word (a small model: 2**8 words, span 6), the accepted words give each
    integer equally often: multiply-shift with Lemire's threshold has no bias."""
    bits, span = 8, 6
    threshold = (1 << bits) % span
    counts = np.zeros(span, int)
    for w in range(1 << bits):
        if (w * span) % (1 << bits) >= threshold:
            counts[(w * span) >> bits] += 1
    assert (counts == counts[0]).all()


def test_plain_random_follows_the_documented_layout():
    """Serial draws: stream 0, element 0, ordinal counting; the k-th nest's work items: stream k, element = the
    linear index, ordinal from 0; a seed: key s, launch 0, ordinal 0, and in serial code the nests counted
    again."""
    generator = PlainRandom(7, 3)
    first = generator.random()
    assert first == uniform_double(*philox4x32((0, 0, 0, 0), (7, 3))[:2])
    values = {}
    for i in generator.prange(2):
        for j in generator.prange(3):
            values[i, j] = (generator.random(), generator.random())
    for (i, j), (a, b) in values.items():
        element = i * 3 + j
        assert a == uniform_double(*philox4x32((0, element, 0, 1), (7, 3))[:2])  # the first nest: stream 1
        assert b == uniform_double(*philox4x32((1, element, 0, 1), (7, 3))[:2])
    assert generator.random() == uniform_double(*philox4x32((1, 0, 0, 0), (7, 3))[:2])  # serial ordinal 1
    assert [generator.random() for _ in generator.prange(1)] == [
        uniform_double(*philox4x32((0, 0, 0, 2), (7, 3))[:2])]  # the second nest: stream 2
    generator.seed(2 ** 32 + 9)  # a run-time seed keeps its low 32 bits
    assert generator.random() == uniform_double(*philox4x32((0, 0, 0, 0), (9, 0))[:2])
    assert [generator.random() for _ in generator.prange(1)] == [
        uniform_double(*philox4x32((0, 0, 0, 1), (9, 0))[:2])]  # the first nest since the seed


def test_plain_randoms_arrays_are_nests_of_their_own():
    """An array of draws: the next nest, element e (C order) the first draw of work item e; serial draws
    between keep their own ordinals; ``rand``/``randn`` take dimensions; integers and a device's 32-bit forms
    have NumPy's dtypes or their narrow ones."""
    generator = PlainRandom(5, 2)
    grid = generator.random((2, 3))
    serial = generator.normal()
    line = generator.rand(4)
    words = philox4x32((0, np.arange(6, dtype=np.uint64), 0, 1), (5, 2))
    assert grid.shape == (2, 3) and grid.ravel().tolist() == uniform_double(words[0], words[1]).tolist()
    assert serial == PlainRandom(5, 2).normal()  # ordinal 0 of stream 0, whatever arrays were drawn before
    words = philox4x32((0, np.arange(4, dtype=np.uint64), 0, 2), (5, 2))
    assert line.tolist() == uniform_double(words[0], words[1]).tolist()
    assert generator.randint(3, size=0).dtype == np.int64 and generator.randn(2, 2).shape == (2, 2)
    assert generator.nests == 4  # the empty array is a nest too
    narrow = PlainRandom(5, 2, double=False, wide=False)
    assert narrow.random(3).dtype == np.float32 and narrow.randint(0, 9, (2,)).dtype == np.int32
    assert narrow.uniform(-1.0, 1.0, 5).dtype == np.float32 and narrow.permutation(4).dtype == np.int32


def test_plain_randoms_permutation_is_the_order_of_one_nests_sort_keys():
    generator = PlainRandom(8, 0)
    order = generator.permutation(50)
    words = philox4x32((0, np.arange(50, dtype=np.uint64), 0, 1), (8, 0))
    keys = (words[0] << np.uint64(32)) | words[1]
    assert order.tolist() == np.argsort(keys, kind="stable").tolist() and sorted(order.tolist()) == list(range(50))
    rows = np.arange(12.0).reshape(6, 2)
    shuffled = rows.copy()
    PlainRandom(8, 0).shuffle(shuffled)
    assert shuffled.tolist() == rows[PlainRandom(8, 0).permutation(6)].tolist()
    assert PlainRandom(8, 0).permutation(rows).tolist() == shuffled.tolist()
    assert not np.array_equal(shuffled, rows)


def test_plain_random_restores_the_key_after_a_work_item_seeds():
    generator = PlainRandom(1, 0)
    inside = []
    for i in generator.prange(3):
        if i == 1:
            generator.seed(99)
        inside.append(generator.random())
    assert inside[2] == uniform_double(*philox4x32((0, 2, 0, 1), (1, 0))[:2])  # work item 2: the nest's key
    assert inside[1] == uniform_double(*philox4x32((0, 1, 0, 1), (99, 0))[:2])
    assert generator.random() == uniform_double(*philox4x32((0, 0, 0, 0), (1, 0))[:2])


def test_the_process_generator_counts_launches_from_its_seed():
    generator = ProcessGenerator(12)
    assert [generator.next_launch() for _ in range(3)] == [Launch(12, 0), Launch(12, 1), Launch(12, 2)]
    generator.seed(12)
    assert generator.next_launch() == Launch(12, 0)
    assert Launch(5, 6).variables() == {KEY_VARIABLE: 5, LAUNCH_VARIABLE: 6}
    keys = {ProcessGenerator().key for _ in range(8)}  # unseeded: the operating system's entropy
    assert len(keys) > 1


@pytest.mark.parametrize("seed", [-1, 1 << 32, 1.5, True, "1"])
def test_the_process_generator_takes_seeds_as_numpy_does(seed):
    with pytest.raises(SvodError, match=r"a random seed is an int in \[0, 2\*\*32\)"):
        ProcessGenerator(seed)


def test_each_launch_takes_a_number_of_its_own_across_threads():
    generator = ProcessGenerator(3)
    taken: list[int] = []

    def take() -> None:
        for _ in range(500):
            taken.append(generator.next_launch().launch)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(2000))


def test_svod_random_seed_seeds_the_process_generator():
    svod.random.seed(77)
    assert svod.random.generator.next_launch() == Launch(77, 0)
