//! The requests pending on one node, oldest first, so the balancer can count a request still in
//! flight as at least as slow as its age (see [`super::node::Upstream`]'s load).

use std::time::Instant;

/// Requests pending on one upstream, oldest first: a ring of start times by sequence number,
/// where a request that ends leaves a gap until every older one has ended too. Steady traffic
/// reuses the ring's room: no allocation per request. A slow request holds the ring open behind
/// it until it ends, which its deadline bounds.
#[derive(Default)]
pub(super) struct Pending {
    /// The sequence number of `started[0]`.
    first: u64,
    /// Start times from `first` on; `None` where the request has ended.
    started: std::collections::VecDeque<Option<Instant>>,
    /// Requests still pending.
    pub(super) count: usize,
}

impl Pending {
    /// Records a request started at `now`; returns its sequence number.
    pub(super) fn begin(&mut self, now: Instant) -> u64 {
        self.started.push_back(Some(now));
        self.count += 1;
        self.first + self.started.len() as u64 - 1
    }

    /// Records the end of request `seq`.
    pub(super) fn end(&mut self, seq: u64) {
        let Some(slot) = usize::try_from(seq.wrapping_sub(self.first))
            .ok()
            .and_then(|i| self.started.get_mut(i))
        else {
            return;
        };
        if slot.take().is_some() {
            self.count -= 1;
        }
        while self.started.front().is_some_and(Option::is_none) {
            self.started.pop_front();
            self.first += 1;
        }
    }

    /// When the oldest pending request started.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.started.front().copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn pending_requests_keep_the_oldest_start_in_any_end_order() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut p = Pending::default();
        let (a, b, c) = (p.begin(at(1)), p.begin(at(2)), p.begin(at(3)));
        assert_eq!((p.count, p.oldest()), (3, Some(at(1))));
        p.end(b);
        assert_eq!((p.count, p.oldest()), (2, Some(at(1))));
        p.end(a);
        assert_eq!((p.count, p.oldest()), (1, Some(at(3))));
        assert_eq!(
            p.started.len(),
            1,
            "ended requests at the front are dropped"
        );
        // Ending twice, or a number never given out, changes nothing.
        p.end(a);
        p.end(c + 100);
        assert_eq!(p.count, 1);
        let d = p.begin(at(4));
        p.end(c);
        assert_eq!((p.count, p.oldest()), (1, Some(at(4))));
        p.end(d);
        assert_eq!((p.count, p.oldest(), p.started.len()), (0, None, 0));
        // Numbers keep counting up after the ring empties.
        assert_eq!(p.begin(at(5)), d + 1);
    }
}
