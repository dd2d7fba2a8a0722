"""Which nodes `dtrun check` puts together, round by round (docs/check.md, "The rounds").

Pairs: round r pairs node i with node i XOR 2^r (the hypercube), so ceil(log2 N) rounds give every
node ceil(log2 N) partners, each round a set of disjoint pairs that run at once. Where N is not a
power of two, a node whose partner does not exist is paired with another such node it has not
met, and a last round or two gives every node at least two partners (where N allows): a node
slow with every partner is the node; one slow pair among good ones is the link.

Bisection: the whole fleet, then halves, quarters, ... down to groups of three (groups of two
are the pairs above): each level's groups are disjoint and run at once.

Pure, standard library only: the workload runs it on the nodes, dtrun reads the same plan.
"""

from __future__ import annotations

Pair = tuple[int, int]

MIN_PARTNERS = 2  # where the fleet allows: one partner cannot tell a node from its link
# Up to this many nodes every pair is measured: 4 nodes' hypercube met 4 of their 6 pairs, and
# their only bisection group is the whole fleet (which decides nothing), so a slow 0-3 or 1-2
# link went unseen, exit 0; one round more meets them all
EVERY_PAIR_UP_TO = 4


def _meet(pairs: list[Pair], met: list[set[int]]) -> None:
    for a, b in pairs:
        met[a].add(b)
        met[b].add(a)


def _match_idle(idle: list[int], met: list[set[int]]) -> list[Pair]:
    """Disjoint pairs among ``idle`` nodes, each pair new."""
    pairs: list[Pair] = []
    free = list(idle)
    while free:
        a = free.pop(0)
        b = next((x for x in free if x not in met[a]), None)
        if b is not None:
            free.remove(b)
            pairs.append((a, b))
    return pairs


def pair_rounds(n: int) -> list[list[Pair]]:
    """Rounds of disjoint pairs (a < b) over ``n`` nodes; never a pair twice."""
    if n < 2:
        return []
    met: list[set[int]] = [set() for _ in range(n)]
    rounds: list[list[Pair]] = []
    for r in range((n - 1).bit_length()):
        step = 1 << r
        pairs = [(i, i ^ step) for i in range(n) if i < (i ^ step) < n]
        _meet(pairs, met)
        paired = {x for pair in pairs for x in pair}
        extra = _match_idle([i for i in range(n) if i not in paired], met)
        _meet(extra, met)
        rounds.append(sorted(pairs + extra))
    want = n - 1 if n <= EVERY_PAIR_UP_TO else min(MIN_PARTNERS, n - 1)
    while any(len(partners) < want for partners in met):
        short = [i for i in range(n) if len(met[i]) < want]
        pairs = []
        busy: set[int] = set()
        for a in short:
            if a in busy:
                continue
            # another short node first, then any free node not yet met
            choices = [x for x in short if x != a and x not in busy and x not in met[a]]
            choices += [x for x in range(n) if x != a and x not in busy and x not in met[a]]
            if choices:
                b = choices[0]
                busy |= {a, b}
                pairs.append((min(a, b), max(a, b)))
        if not pairs:  # pragma: no cover - every short node has an unmet free node while n > 2
            break
        _meet(pairs, met)
        rounds.append(sorted(pairs))
    return rounds


def bisection_levels(n: int) -> list[list[list[int]]]:
    """Level 0 the whole fleet, then each group split in halves; groups of three or more."""
    levels: list[list[list[int]]] = []
    groups = [list(range(n))]
    while groups:
        levels.append(groups)
        halves = []
        for group in groups:
            middle = (len(group) + 1) // 2
            halves += [group[:middle], group[middle:]]
        groups = [group for group in halves if len(group) >= 3]
    return [level for level in levels if all(len(group) >= 3 for group in level)]
