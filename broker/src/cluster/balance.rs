//! Rebalancing arithmetic for the allocator: whether moving one assignment from a busier
//! member to a quieter one makes the spread strictly better, and how many moves may be
//! under way at once.
//!
//! Lives on: nothing; pure functions and constants, called by the allocator's planner
//! (one task on core 0, see `allocator.rs`).
//!
//! Gazette's allocator gives every member a "fair share" capacity of
//! `ItemLimit * ItemSlots / MemberSlots` (its limit scaled by the ratio of desired slots to
//! the sum of all limits). Here the move criterion [`improves`] strictly lowers
//! `sum(load^2 / limit)` over members, whose minimum is the same proportional spread, so
//! repeated moves always end; with equal limits it stops exactly when every member is
//! within one assignment of every other (so within +-1 of the mean).

/// Most assignments being moved at once (journals with more serving assignments than
/// their desired replication), so that a joining broker does not make every journal
/// resync at the same moment.
pub const MAX_MOVES_IN_FLIGHT: usize = 16;

/// Whether moving one assignment from a member with `src_load` of `src_limit` to one with
/// `dst_load` of `dst_limit` strictly lowers `sum(load^2 / limit)`: `(2*dst+1)/dst_limit <
/// (2*src-1)/src_limit`. With equal limits: `src >= dst + 2`. Never true for a destination
/// without room or a zero limit.
pub fn improves(src_load: usize, src_limit: u32, dst_load: usize, dst_limit: u32) -> bool {
    if src_load == 0 || dst_limit == 0 || src_limit == 0 || dst_load >= dst_limit as usize {
        return false;
    }
    let lhs = (2 * dst_load as u128 + 1) * u128::from(src_limit);
    let rhs = (2 * src_load as u128 - 1) * u128::from(dst_limit);
    lhs < rhs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_limits_move_only_across_a_gap_of_two() {
        assert!(improves(3, 10, 1, 10));
        assert!(!improves(3, 10, 2, 10));
        assert!(!improves(2, 10, 2, 10));
        assert!(improves(8, 1024, 0, 1024));
        assert!(!improves(1, 1024, 0, 1024));
    }

    #[test]
    fn limits_weigh_the_criterion() {
        // 4 of 100 is quieter than 2 of 10.
        assert!(improves(2, 10, 4, 100));
        assert!(!improves(4, 100, 2, 10));
        // No room, zero limits, nothing to move.
        assert!(!improves(5, 10, 3, 3));
        assert!(!improves(5, 10, 0, 0));
        assert!(!improves(5, 0, 0, 10));
        assert!(!improves(0, 10, 0, 10));
    }

    #[test]
    fn moves_end_balanced() {
        // Greedy moves from the busiest to the quietest always end, within one.
        let mut loads = [40usize, 40, 0, 0, 0];
        let mut moves = 0;
        loop {
            let (s, _) = loads.iter().enumerate().max_by_key(|(_, l)| **l).unwrap();
            let (d, _) = loads.iter().enumerate().min_by_key(|(_, l)| **l).unwrap();
            if !improves(loads[s], 100, loads[d], 100) {
                break;
            }
            loads[s] -= 1;
            loads[d] += 1;
            moves += 1;
        }
        assert_eq!(loads, [16, 16, 16, 16, 16]);
        assert_eq!(moves, 48);
    }
}
