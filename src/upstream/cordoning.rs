//! Cordoning the pool's nodes: by an admin ([`Pool::cordon`]), by the file (at start, and by
//! each reload as it publishes the new nodes), and by the fleet (with `[redis]`: its cordons read
//! before the first request, then every `[health] interval` by a task of its own). Who may
//! cordon and how the sources combine is `cordons.rs`; here they are applied to the nodes, each
//! change under the pool's cordon lock (a reload publishing new nodes never loses one) and
//! reported as a state change when it cordons or uncordons the node.

use std::sync::Arc;

use tokio::sync::watch;

use super::cordons::{By, CordonedBy, FleetCordons, FleetError, Source};
use super::events::{self, NodeEvent};
use super::node::Upstream;
use super::pool::Pool;
use crate::config::UpstreamConfig;
use crate::shared::Shared;

/// What an admin's cordon or uncordon did ([`Pool::cordon`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cordoned {
    /// Whether the node is cordoned now, by any source.
    pub cordoned: bool,
    /// Who cordons it now: `file`, `instance`, `fleet`.
    pub cordoned_by: Vec<&'static str>,
    /// With `[redis]`, why the fleet's Redis did not take it: it holds on this instance, and is
    /// written at the next `[health] interval` Redis answers. `None`: taken, or no `[redis]`.
    pub unshared: Option<String>,
}

impl Pool {
    /// Cordons (`on`) or uncordons the upstream `name` for an admin: cordoned, it takes no new
    /// calls (those in flight finish; pinned calls still reach it) and its health checks go on.
    /// With `[redis]` the fleet's Redis is told too (one command, cut at `[redis] timeout`), so
    /// that every instance follows. An uncordon never lifts the file's cordon. `None` when no
    /// upstream has that name.
    pub async fn cordon(&self, name: &str, on: bool) -> Option<Cordoned> {
        // A name no upstream has is not written to the fleet either.
        self.members().upstreams.iter().find(|u| &*u.name == name)?;
        let fleet = self.fleet_cordons.get();
        // Held until the change is applied: the fleet's cordons are not read meanwhile.
        let mut unsent = match fleet {
            Some(fleet) => Some(fleet.unsent.lock().await),
            None => None,
        };
        let written = match (fleet, unsent.as_mut()) {
            (Some(fleet), Some(unsent)) => {
                let result = fleet.write(name, on).await;
                if result.is_ok() {
                    unsent.remove(name);
                } else {
                    // Written at the next interval Redis answers (`follow_fleet`).
                    unsent.insert(name.into(), on);
                }
                Some(result)
            }
            _ => None,
        };
        let shared = written.as_ref().map(Result::is_ok);
        let now = self.change_cordons(name, By::Admin, |c| c.by_admin(on, shared))?;
        drop(unsent);
        Some(Cordoned {
            cordoned: now.any(),
            cordoned_by: now.names(),
            unshared: written.and_then(Result::err).map(|e| e.to_string()),
        })
    }

    /// Changes who cordons the node `name` by `change`, under the cordon lock; `None` when no
    /// node has that name.
    fn change_cordons(
        &self,
        name: &str,
        by: By,
        change: impl FnOnce(CordonedBy) -> CordonedBy,
    ) -> Option<CordonedBy> {
        let held = self.cordon_lock.lock();
        let members = self.members();
        let upstream = members.upstreams.iter().find(|u| &*u.name == name)?;
        let before = upstream.cordoned_by();
        let now = change(before);
        self.set_cordons(&held, upstream, before, now, by);
        Some(now)
    }

    /// Sets who cordons `upstream` (under the cordon lock, `_held`), reporting it when the node
    /// is cordoned now and was not (`before`), or the other way round.
    fn set_cordons(
        &self,
        _held: &parking_lot::MutexGuard<'_, ()>,
        upstream: &Upstream,
        before: CordonedBy,
        now: CordonedBy,
        by: By,
    ) {
        upstream.set_cordoned_by(now);
        if before.any() == now.any() {
            return;
        }
        let event = if now.any() {
            NodeEvent::Cordoned { by }
        } else {
            NodeEvent::Uncordoned { by }
        };
        events::report(&self.metrics, &upstream.name, event);
        // Calls queued for a slot look again: another node may take them.
        self.slot_freed.notify_waiters();
        // A primary cordoned may leave the fallbacks to serve: they are checked at once.
        if !upstream.fallback {
            self.judge_primaries(&self.members());
        }
    }

    /// Gives the nodes `next` their cordons (under the cordon lock, `held`), each by its name:
    /// the ones its name had on a node of `old` (an admin's, the fleet's) and its own table's in
    /// `configs` (the file's). So the pool starts (`old` empty) and a reload publishes its nodes.
    /// Gives the names whose file cordon changed, and whether the file cordons them now.
    pub(super) fn carry_cordons(
        &self,
        held: &parking_lot::MutexGuard<'_, ()>,
        old: &[Arc<Upstream>],
        next: &[Arc<Upstream>],
        configs: &[UpstreamConfig],
    ) -> Vec<(String, bool)> {
        let mut by_file = Vec::new();
        for config in configs {
            let Some(upstream) = next.iter().find(|u| *u.name == *config.name) else {
                continue;
            };
            let before = old
                .iter()
                .find(|o| o.name == upstream.name)
                .map(|o| o.cordoned_by())
                .unwrap_or_default();
            let now = before.carried(config.cordoned);
            self.set_cordons(held, upstream, before, now, By::File);
            if before.has(Source::File) != config.cordoned {
                by_file.push((config.name.clone(), config.cordoned));
            }
        }
        by_file
    }

    /// Shares this pool's cordons with the fleet through `shared` (`[redis]`; once, at start)
    /// and reads the fleet's now, before the first request.
    pub(crate) async fn share_cordons(&self, shared: Arc<Shared>) {
        if self.fleet_cordons.set(FleetCordons::new(shared)).is_ok() {
            self.follow_fleet().await;
        }
    }

    /// Follows the fleet's cordons every `[health] interval` (as it is at each turn) until `stop`
    /// flips; nothing without [`Pool::share_cordons`].
    pub(crate) fn spawn_fleet_cordons(self: &Arc<Self>, mut stop: watch::Receiver<bool>) {
        if self.fleet_cordons.get().is_none() {
            return;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let every = match pool.upgrade() {
                    Some(pool) => pool.members().health.interval,
                    None => return,
                };
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                let Some(pool) = pool.upgrade() else { return };
                tokio::select! {
                    () = pool.follow_fleet() => {}
                    _ = stop.changed() => return,
                }
            }
        });
    }

    /// One round: the admin's cordons and uncordons Redis has not taken yet are written, then
    /// the fleet's cordons of every node are read and applied. While Redis cannot be written or
    /// read, nothing changes: the fleet's cordons stay as last known, and this instance's own.
    async fn follow_fleet(&self) {
        let Some(fleet) = self.fleet_cordons.get() else {
            return;
        };
        let mut unsent = fleet.unsent.lock().await;
        while let Some((name, on)) = unsent.first_key_value().map(|(n, on)| (n.clone(), *on)) {
            if let Err(e) = fleet.write(&name, on).await {
                unshared(&e, "an admin's cordon is not written yet");
                return;
            }
            unsent.remove(&name);
            if on {
                // This instance's cordon is the fleet's from now on.
                self.change_cordons(&name, By::Admin, CordonedBy::shared);
            }
            tracing::info!(upstream = %name, cordoned = on, "fleet cordons: an admin's earlier change written to Redis");
        }
        let names: Vec<Arc<str>> = self
            .members()
            .upstreams
            .iter()
            .map(|u| u.name.clone())
            .collect();
        let marks = match fleet.read(&names).await {
            Ok(marks) => marks,
            Err(e) => {
                unshared(&e, "the fleet's cordons are kept as last read");
                return;
            }
        };
        // Every write is made: what was read decides.
        let held = self.cordon_lock.lock();
        let members = self.members();
        for (name, cordoned) in names.iter().zip(marks) {
            if let Some(u) = members.upstreams.iter().find(|u| u.name == *name) {
                let before = u.cordoned_by();
                let now = before.with(Source::Fleet, cordoned);
                self.set_cordons(&held, u, before, now, By::Fleet);
            }
        }
        drop(held);
        drop(unsent);
    }
}

/// Says why the fleet's cordons were not written or read, at debug: the shared tier says when
/// Redis goes down and comes back, and [`FleetCordons`] when its key holds no cordons.
fn unshared(error: &FleetError, what: &str) {
    tracing::debug!(error = %error, "fleet cordons: {what}");
}
