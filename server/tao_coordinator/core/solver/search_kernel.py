"""The compiled inner loops of the branch-and-bound search (`branch_bound.py` states the method and its proof).

Everything here works on dense integer arrays in search order (item k, node b, component j):
`weight[k]`, `value[k, b, j]`, `best[k, j]` (the largest over nodes), `special[k, b]` (the value on b is not the
item's base value). Compiled once by Numba (cached on disk), so a search node costs well under a microsecond.

Bound tables (`build_tables`): for a component whose base value is 0 for every item, per node, one dense table
per suffix of the items valued there: `table[v]` is the least weight reaching a value of at least v (non-decreasing
in v). A table is stored only as far as its weights fit the node's capacity (`length[j, b, s]` entries): a room never
exceeds the capacity, so no lookup needs an entry beyond, and one past the stored end reads as out of reach. That cut
is what keeps planning cheap when a node's sessions want several times its memory: the stored entries grow with
what fits, not with every value the node's sessions could sum to. `suffix_of[j, b, k]` is the suffix that starts at
the first such item at or after position k.
"""

from __future__ import annotations

import numpy as np
from numba import njit

UNREACHABLE = 1 << 60

ORDER_STRIDE = 16
"""`orders[j, c]` is component j's ratio order restricted to positions ≥ c · ORDER_STRIDE, so a fractional bound at
depth k walks past at most this many decided items (instead of all k of them: deep in a search of hundreds of items
that walk was most of the time a node took)."""


@njit(cache=True)
def ratio_order(weight, column):
    """Positions with a positive value in `column`, by value/weight, largest first (exact: cross-multiplied), so a
    fractional knapsack walked in this order is the LP optimum."""
    positions = np.flatnonzero(column > 0)
    count = positions.size
    for a in range(1, count):
        p = positions[a]
        c = a
        while c > 0:
            q = positions[c - 1]
            # column[p]/weight[p] > column[q]/weight[q]; a weightless item has an infinite ratio
            if weight[q] > 0 and (weight[p] == 0 or column[p] * weight[q] > column[q] * weight[p]):
                positions[c] = q
                c -= 1
            else:
                break
        positions[c] = p
    return positions


@njit(cache=True)
def _precedes(a, b, group, ratio):
    """Search order: group ascending, then each component's best value per weight descending, then position."""
    if group[a] != group[b]:
        return group[a] < group[b]
    for j in range(ratio.shape[1]):
        if ratio[a, j] != ratio[b, j]:
            return ratio[a, j] > ratio[b, j]
    return a < b


@njit(cache=True)
def search_order(value, special, weight, best):
    """The items in search order (`branch_bound.py`): first those valued above their least in component 0 on
    several nodes (group −1), then those valued so on one node, grouped by that node, then the rest (group m);
    within a group by `best` per weight, component by component."""
    n, m, width = value.shape
    group = np.empty(n, dtype=np.int64)
    ratio = np.empty((n, width), dtype=np.float64)
    for k in range(n):
        least = value[k, 0, 0]
        for b in range(1, m):
            least = min(least, value[k, b, 0])
        home, home_value, homes = 0, -1, 0
        for b in range(m):
            first = value[k, b, 0] if special[k, b] else 0
            if first > home_value:
                home, home_value = b, first
            if first > least:
                homes += 1
        group[k] = -1 if homes > 1 else (home if homes == 1 else m)
        scale = float(max(weight[k], 1))
        for j in range(width):
            ratio[k, j] = best[k, j] / scale
    order = np.arange(n)
    spare = np.empty(n, dtype=np.int64)
    run = 1
    while run < n:  # bottom-up merge sort: stable and O(n log n)
        for lo in range(0, n, 2 * run):
            mid, hi = min(lo + run, n), min(lo + 2 * run, n)
            a, b, c = lo, mid, lo
            while a < mid and b < hi:
                if _precedes(order[b], order[a], group, ratio):
                    spare[c] = order[b]
                    b += 1
                else:
                    spare[c] = order[a]
                    a += 1
                c += 1
            while a < mid:
                spare[c] = order[a]
                a += 1
                c += 1
            while b < hi:
                spare[c] = order[b]
                b += 1
                c += 1
        order, spare = spare, order
        run *= 2
    return order


@njit(cache=True)
def prepare(weight_in, base, rows, capacities, max_cells, max_span):
    """The problem's dense arrays in search order, from the fitting items' weights, base values (`base[k, j]`)
    and special values (`rows[r] = (k, b, value…)`). Returns (order, weight, value, special, best, twin,
    last_special, lightest_after, orders, counts, tabled, offset, length, data, suffix_of, member_best,
    joint_offset, joint_span, joint_data)."""
    n, width = base.shape
    m = capacities.size
    unordered = np.empty((n, m, width), dtype=np.int64)
    unordered_special = np.zeros((n, m), dtype=np.bool_)
    for k in range(n):
        for b in range(m):
            unordered[k, b, :] = base[k]
    for r in range(rows.shape[0]):
        k, b = rows[r, 0], rows[r, 1]
        unordered[k, b, :] = rows[r, 2:]
        unordered_special[k, b] = True
    unordered_best = np.empty((n, width), dtype=np.int64)
    for k in range(n):
        for j in range(width):
            top = unordered[k, 0, j]
            for b in range(1, m):
                top = max(top, unordered[k, b, j])
            unordered_best[k, j] = top
    order = search_order(unordered, unordered_special, weight_in, unordered_best)
    weight = weight_in[order]
    value = unordered[order]
    special = unordered_special[order]
    best = unordered_best[order]
    twin = np.zeros(n, dtype=np.bool_)
    for k in range(1, n):
        # valued as the item before it on every node, and no lighter: left out after it (`branch_bound.py`)
        twin[k] = weight[k] >= weight[k - 1] and (value[k] == value[k - 1]).all()
    last_special = np.full(m, -1, dtype=np.int64)
    for k in range(n):
        for b in range(m):
            if special[k, b]:
                last_special[b] = k
    lightest_after = np.full(n + 1, UNREACHABLE, dtype=np.int64)
    for k in range(n - 1, -1, -1):
        lightest_after[k] = min(lightest_after[k + 1], weight[k])
    checkpoints = n // ORDER_STRIDE + 1
    orders = np.full((width, checkpoints, n), -1, dtype=np.int64)
    counts = np.zeros((width, checkpoints), dtype=np.int64)
    for j in range(width):
        positions = ratio_order(weight, best[:, j].copy())
        for c in range(checkpoints):
            start, t = c * ORDER_STRIDE, 0
            for p in positions:
                if p >= start:
                    orders[j, c, t] = p
                    t += 1
            counts[j, c] = t
    zero_based = np.ones(width, dtype=np.bool_)
    for k in range(n):
        for b in range(m):
            if not special[k, b]:
                for j in range(width):
                    if value[k, b, j] > 0:
                        zero_based[j] = False
    offset, length, data, suffix_of, member_best, tabled = build_tables(
        weight, value, best, special, zero_based, capacities, max_cells
    )
    joint_offset, joint_span, joint_data = build_joint_tables(
        weight, value, special, tabled, offset, length, max_span, max_cells
    )
    return (
        order,
        weight,
        value,
        special,
        best,
        twin,
        last_special,
        lightest_after,
        orders,
        counts,
        tabled,
        offset,
        length,
        data,
        suffix_of,
        member_best,
        joint_offset,
        joint_span,
        joint_data,
    )


@njit(cache=True)
def _valued_on(value, special, b, j):
    """Positions, ascending, of the items valued above 0 on node b in component j: the members of b's tables."""
    n = value.shape[0]
    count = 0
    for k in range(n):
        if special[k, b] and value[k, b, j] > 0:
            count += 1
    positions = np.empty(count, dtype=np.int64)
    c = 0
    for k in range(n):
        if special[k, b] and value[k, b, j] > 0:
            positions[c] = k
            c += 1
    return positions


@njit(cache=True)
def build_tables(weight, value, best, special, zero_based, capacities, max_cells):
    """Tables for every component whose base values are all 0 (`zero_based`) and whose full tables would stay
    within `max_cells` entries (the same test whatever the cut, so the cut changes no bound). Returns (offset,
    length, data, suffix_of, member_best, tabled): suffix s of node b's items in component j is stored at
    `data[offset[j, b, s]:][:length[j, b, s]]`, cut where its weights pass `capacities[b]`; `member_best[b, s, j]`
    sums `best[:, j]` over the suffix s of the items valued on b in component 0 (when it is tabled)."""
    n, m, width = value.shape
    offset = np.zeros((width, m, n + 1), dtype=np.int64)
    length = np.ones((width, m, n + 1), dtype=np.int64)
    suffix_of = np.zeros((width, m, n + 1), dtype=np.int64)
    member_best = np.zeros((m, n + 1, width), dtype=np.int64)
    tabled = zero_based.copy()
    size = 0
    for j in range(width):
        if not tabled[j]:
            continue
        cells = 0
        for b in range(m):
            total, count = 0, 0
            for k in range(n):
                if special[k, b] and value[k, b, j] > 0:
                    total += value[k, b, j]
                    count += 1
            cells += (count + 1) * (total + 1)
        if cells > max_cells:
            tabled[j] = False
        else:
            size += cells
    data = np.empty(size, dtype=np.int64)  # an upper bound: every entry used is written, the cut ones never are
    cursor = 0
    for j in range(width):
        if not tabled[j]:
            continue
        for b in range(m):
            positions = _valued_on(value, special, b, j)
            count, capacity = positions.size, capacities[b]
            # suffix s covers positions[s:]; the last table (s = count) reaches value 0 only, built first
            offset[j, b, count] = cursor
            data[cursor] = 0
            cursor += 1
            for s in range(count - 1, -1, -1):
                after, after_length = offset[j, b, s + 1], length[j, b, s + 1]
                here = cursor
                w, v = weight[positions[s]], value[positions[s], b, j]
                stored = 0
                for t in range(after_length + v):
                    least = data[after + t] if t < after_length else UNREACHABLE
                    if t < v:
                        least = min(least, w)  # alone, the item reaches up to its value
                    elif t - v < after_length:
                        least = min(least, data[after + t - v] + w)
                    if least > capacity:
                        break  # non-decreasing: every later entry passes the capacity too
                    data[here + t] = least
                    stored += 1
                offset[j, b, s] = here
                length[j, b, s] = max(stored, 1)  # entry 0 (weight 0) always fits
                cursor += max(stored, 1)
                if j == 0:
                    for i in range(width):
                        member_best[b, s, i] = member_best[b, s + 1, i] + best[positions[s], i]
            c = 0
            for k in range(n + 1):
                while c < count and positions[c] < k:
                    c += 1
                suffix_of[j, b, k] = c
    return offset, length, data[:cursor], suffix_of, member_best, tabled


@njit(cache=True)
def build_joint_tables(weight, value, special, tabled, offset, length, max_span, max_cells):
    """For each component j ≥ 1 that is not tabled itself, per node b, when component 0 is tabled: a table per
    suffix of the items valued on b in component 0, `joint[c, r]` = the least weight reaching ≥ c in component 0
    and ≥ r in component j with those items on b. Declined (span 0) when component j's sums over them exceed
    `max_span` or the tables `max_cells`. Returns (joint_offset[j, b, s], joint_span[j, b], joint_data)."""
    n, m, width = value.shape
    joint_offset = np.zeros((width, m, n + 1), dtype=np.int64)
    joint_span = np.zeros((width, m), dtype=np.int64)
    if width == 0 or not tabled[0]:
        return joint_offset, joint_span, np.zeros(0, dtype=np.int64)
    size = 0
    for j in range(1, width):
        if tabled[j]:
            continue
        cells, uncut = 0, 0
        spans = np.zeros(m, dtype=np.int64)
        for b in range(m):
            total, total_first, count = 0, 0, 0
            for k in range(n):
                if special[k, b] and value[k, b, 0] > 0:
                    total += value[k, b, j]
                    total_first += value[k, b, 0]
                    count += 1
            spans[b] = total + 1
            cells += (count + 1) * length[0, b, 0] * (total + 1)
            # declined as the uncut tables would be, so the cut never changes which bounds a search has
            uncut += (count + 1) * (total_first + 1) * (total + 1)
            if total + 1 > max_span:
                uncut = max_cells + 1
        if uncut <= max_cells:
            joint_span[j] = spans
            size += cells
    data = np.full(size, UNREACHABLE, dtype=np.int64)
    cursor = 0
    for j in range(1, width):
        if joint_span[j, 0] == 0:
            continue
        for b in range(m):
            positions = _valued_on(value, special, b, 0)
            count = positions.size
            spans_c, spans_r = length[0, b, 0], joint_span[j, b]
            block = spans_c * spans_r
            for t in range(count + 1):
                joint_offset[j, b, t] = cursor + t * block
            data[joint_offset[j, b, count]] = 0
            for t in range(count - 1, -1, -1):
                here, after = joint_offset[j, b, t], joint_offset[j, b, t + 1]
                w, v, u = weight[positions[t]], value[positions[t], b, 0], value[positions[t], b, j]
                for cc in range(spans_c):
                    for rr in range(spans_r):
                        reach = data[after + max(cc - v, 0) * spans_r + max(rr - u, 0)] + w
                        data[here + cc * spans_r + rr] = min(data[after + cc * spans_r + rr], reach)
            cursor += (count + 1) * block
    return joint_offset, joint_span, data


@njit(cache=True)
def _table_value(data, start, span, room):
    """The largest v with table[v] ≤ room (table[0] = 0 ≤ room)."""
    lo, hi = 0, span - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if data[start + mid] <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True)
def _within(data, start, stored, v, room):
    """Whether the table reaches v within `room` (an entry past the stored end lies beyond every room)."""
    return v < stored and data[start + v] <= room


@njit(cache=True)
def _fractional(order, count, weight, column, k, room, heaviest):
    """Fractional knapsack of `column` over positions ≥ k into `room`, rounded down, leaving out items heavier
    than `heaviest` (they fit in none of the rooms pooled into `room`)."""
    bound = 0
    for t in range(count):
        p = order[t]
        if p < k:
            continue
        w = weight[p]
        if w > heaviest:
            continue
        if w <= room:
            room -= w
            bound += column[p]
        else:
            return bound + room * column[p] // w
    return bound


@njit(cache=True)
def _component_bound(j, k, remaining, lightest, weight, best, orders, counts, tabled, offset, length, data, suffix_of):
    m = remaining.size
    if tabled[j]:
        total = 0
        for b in range(m):
            s = suffix_of[j, b, k]
            total += _table_value(data, offset[j, b, s], length[j, b, s], remaining[b])
        return total
    order, count = orders[j, k // ORDER_STRIDE], counts[j, k // ORDER_STRIDE]
    room, heaviest, node_wise = 0, 0, 0
    for b in range(m):
        if remaining[b] >= lightest:
            room += remaining[b]
            heaviest = max(heaviest, remaining[b])
            node_wise += _fractional(order, count, weight, best[:, j], k, remaining[b], remaining[b])
    pooled = _fractional(order, count, weight, best[:, j], k, room, heaviest)
    return min(pooled, node_wise)


@njit(cache=True)
def _cannot_improve(
    k,
    current,
    incumbent,
    remaining,
    lightest,
    weight,
    best,
    orders,
    counts,
    tabled,
    offset,
    length,
    data,
    suffix_of,
    committed,
    reached,
    member_best,
    joint_offset,
    joint_span,
    joint_data,
    width,
):
    """Whether no completion beats the incumbent lexicographically in the first `width` components (module
    docstring of branch_bound.py)."""
    m = remaining.size
    tied_first = False
    for j in range(width):
        if j == 0 and tabled[0]:
            # each node's own credit bound, kept: a tie below commits it
            bound = 0
            for b in range(m):
                s = suffix_of[0, b, k]
                reached[b] = _table_value(data, offset[0, b, s], length[0, b, s], remaining[b])
                bound += reached[b]
        else:
            bound = _component_bound(
                j, k, remaining, lightest, weight, best, orders, counts, tabled, offset, length, data, suffix_of
            )
        if j > 0 and tied_first:
            # every better completion reaches each node's own first-component bound: what that commits
            order, count = orders[j, k // ORDER_STRIDE], counts[j, k // ORDER_STRIDE]
            home_total, per_node, leftover, heaviest = 0, 0, 0, 0
            for b in range(m):
                s = suffix_of[0, b, k]
                home = member_best[b, s, j]
                span = joint_span[j, b]
                if span > 0:
                    home = _table_value(joint_data, joint_offset[j, b, s] + reached[b] * span, span, remaining[b])
                room = remaining[b] - committed[b]
                home_total += home
                leftover += room
                heaviest = max(heaviest, room)
                per_node += home + _fractional(order, count, weight, best[:, j], k, room, room)
            pooled = home_total + _fractional(order, count, weight, best[:, j], k, leftover, heaviest)
            bound = min(bound, per_node, pooled)
        reach = current[j] + bound
        if reach != incumbent[j]:
            return reach < incumbent[j]
        if j == 0 and tabled[0]:
            tied_first = True
            for b in range(m):
                committed[b] = data[offset[0, b, suffix_of[0, b, k]] + reached[b]]
    return True


@njit(cache=True)
def root_bound(remaining, lightest, weight, best, orders, counts, tabled, offset, length, data, suffix_of):
    width = best.shape[1]
    bound = np.zeros(width, dtype=np.int64)
    for j in range(width):
        bound[j] = _component_bound(
            j, 0, remaining, lightest, weight, best, orders, counts, tabled, offset, length, data, suffix_of
        )
    return bound


@njit(cache=True)
def home_start(weight, value, special, capacities, tabled, offset, length, data):
    """A feasible start for the search: per node, the credit-optimal set of the items valued there in component 0,
    read back from that node's table (an item valued on several nodes goes to the first that takes it; when none
    is, the first component of this start is optimal: total credit is then a sum of independent per-node
    knapsacks), then every other item in search order on the node where it is worth most, ties to the tightest
    fit. All −1 (no start) when component 0 is not tabled."""
    n, m, width = value.shape
    path = np.full(n, -1, dtype=np.int64)
    if width == 0 or not tabled[0]:
        return path
    remaining = capacities.copy()
    for b in range(m):
        positions = _valued_on(value, special, b, 0)
        room = remaining[b]
        target = _table_value(data, offset[0, b, 0], length[0, b, 0], room)
        for s in range(positions.size):
            k = positions[s]
            if target == 0:
                break
            needed = not _within(data, offset[0, b, s + 1], length[0, b, s + 1], target, room)
            if path[k] >= 0 or weight[k] > room or not needed:
                continue  # taken elsewhere (the rest may then fall short), too large, or not needed for the target
            path[k] = b
            room -= weight[k]
            target = max(target - value[k, b, 0], 0)
        remaining[b] = room
    for k in range(n):
        if path[k] >= 0:
            continue
        chosen = -1
        for b in range(m):
            if remaining[b] < weight[k]:
                continue
            if chosen < 0:
                chosen = b
                continue
            better, decided = False, False
            for j in range(width):
                if value[k, b, j] != value[k, chosen, j]:
                    better, decided = value[k, b, j] > value[k, chosen, j], True
                    break
            if not decided:
                better = remaining[b] < remaining[chosen]
            if better:
                chosen = b
        if chosen >= 0:
            path[k] = chosen
            remaining[chosen] -= weight[k]
    return path


@njit(cache=True)
def search(
    weight,
    value,
    best,
    special,
    capacities,
    twin,
    last_special,
    lightest_after,
    orders,
    counts,
    tabled,
    offset,
    length,
    data,
    suffix_of,
    member_best,
    joint_offset,
    joint_span,
    joint_data,
    incumbent_path,
    node_limit,
    used,
):
    """Depth-first search from the incumbent, comparing the first `used` components; returns (best path, best
    value, nodes visited, finished)."""
    n, m, width = value.shape
    remaining = capacities.copy()
    path = np.full(n, -1, dtype=np.int64)
    best_path = incumbent_path.copy()
    incumbent = np.zeros(width, dtype=np.int64)
    for k in range(n):
        if best_path[k] >= 0:
            incumbent += value[k, best_path[k]]
    current = np.zeros((n + 1, width), dtype=np.int64)
    choices = np.full((n + 1, m + 1), -1, dtype=np.int64)
    choice_count = np.zeros(n + 1, dtype=np.int64)
    next_choice = np.zeros(n + 1, dtype=np.int64)
    left_out = np.zeros(n + 1, dtype=np.bool_)
    committed = np.zeros(m, dtype=np.int64)
    reached = np.zeros(m, dtype=np.int64)
    keys = np.zeros((m, width + 2), dtype=np.int64)
    seen_rooms = np.zeros(m, dtype=np.int64)
    nodes = 0
    depth = 0
    entering = True
    while depth >= 0:
        k = depth
        if entering:
            entering = False
            nodes += 1
            if nodes > node_limit:
                return best_path, incumbent, nodes, False
            better = False
            for j in range(used):
                if current[k, j] != incumbent[j]:
                    better = current[k, j] > incumbent[j]
                    break
            if better:
                incumbent[:] = current[k]
                best_path[:k] = path[:k]
                best_path[k:] = -1
            choice_count[k] = 0
            next_choice[k] = 0
            if k < n and not _cannot_improve(
                k,
                current[k],
                incumbent,
                remaining,
                lightest_after[k],
                weight,
                best,
                orders,
                counts,
                tabled,
                offset,
                length,
                data,
                suffix_of,
                committed,
                reached,
                member_best,
                joint_offset,
                joint_span,
                joint_data,
                used,
            ):
                count = 0
                if not (left_out[k] and twin[k]):
                    w = weight[k]
                    distinct = 0
                    for b in range(m):
                        room = remaining[b]
                        if room < w:
                            continue
                        if not special[k, b] and last_special[b] < k:
                            duplicate = False
                            for t in range(distinct):
                                if seen_rooms[t] == room:
                                    duplicate = True
                            if duplicate:
                                continue  # an interchangeable node was tried already
                            seen_rooms[distinct] = room
                            distinct += 1
                        # key: value on b (larger first), then tighter fit, then lower node
                        for j in range(width):
                            keys[count, j] = value[k, b, j]
                        keys[count, width] = w - room
                        keys[count, width + 1] = -b
                        c = count
                        while c > 0:
                            larger = False
                            for t in range(width + 2):
                                if keys[c, t] != keys[c - 1, t]:
                                    larger = keys[c, t] > keys[c - 1, t]
                                    break
                            if not larger:
                                break
                            for t in range(width + 2):
                                keys[c, t], keys[c - 1, t] = keys[c - 1, t], keys[c, t]
                            c -= 1
                        count += 1
                    for c in range(count):
                        choices[k, c] = -keys[c, width + 1]
                choices[k, count] = -1
                choice_count[k] = count + 1
        # undo this depth's previous choice
        if next_choice[k] > 0:
            previous = choices[k, next_choice[k] - 1]
            if previous >= 0:
                remaining[previous] += weight[k]
                path[k] = -1
        if next_choice[k] >= choice_count[k]:
            depth -= 1
            continue
        node = choices[k, next_choice[k]]
        next_choice[k] += 1
        if node >= 0:
            remaining[node] -= weight[k]
            path[k] = node
            current[k + 1] = current[k] + value[k, node]
            left_out[k + 1] = False
        else:
            current[k + 1] = current[k]
            left_out[k + 1] = True
        depth = k + 1
        entering = True
    return best_path, incumbent, nodes, True
