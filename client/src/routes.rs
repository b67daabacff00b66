//! The route cache (Gazette's `client.RouteCache`): the last Route seen for each journal,
//! so that calls go straight to the journal's primary (appends) or a member (reads)
//! instead of being proxied. Updated from every response Header; an empty Route, or a
//! transport failure on the routed broker, invalidates the entry.
//!
//! Lives on: [`crate::Client`] (shared by every clone), behind a mutex.

use protocol::Route;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Routes by journal name, bounded in size, each valid for `ttl`.
pub(crate) struct RouteCache {
    routes: Mutex<HashMap<String, (Route, Instant)>>,
    capacity: usize,
    ttl: Duration,
}

impl RouteCache {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> RouteCache {
        RouteCache {
            routes: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            ttl,
        }
    }

    /// Records `route` for `journal`; a missing or member-less Route removes the entry.
    pub(crate) fn update(&self, journal: &str, route: Option<&Route>) {
        let mut routes = self.lock();
        let Some(route) = route.filter(|r| !r.members.is_empty()) else {
            routes.remove(journal);
            return;
        };
        if routes.len() >= self.capacity && !routes.contains_key(journal) {
            self.evict(&mut routes);
        }
        routes.insert(journal.to_string(), (route.clone(), Instant::now()));
    }

    /// The cached, unexpired Route of `journal`.
    pub(crate) fn get(&self, journal: &str) -> Option<Route> {
        let mut routes = self.lock();
        let (route, at) = routes.get(journal)?;
        if at.elapsed() > self.ttl {
            routes.remove(journal);
            return None;
        }
        Some(route.clone())
    }

    /// Makes room: expired entries first, else the oldest one.
    fn evict(&self, routes: &mut HashMap<String, (Route, Instant)>) {
        routes.retain(|_, (_, at)| at.elapsed() <= self.ttl);
        if routes.len() >= self.capacity
            && let Some(oldest) = routes
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            routes.remove(&oldest);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Route, Instant)>> {
        // Entries are independent: a panicking holder cannot leave them inconsistent.
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The endpoint to dial for `route`: its primary's when `primary` is wanted (or when it
/// has one), else its first member's that has an endpoint.
pub(crate) fn pick_endpoint(route: &Route, primary: bool) -> Option<String> {
    let at = |i: usize| route.endpoints.get(i).filter(|e| !e.is_empty()).cloned();
    if let Ok(p) = usize::try_from(route.primary)
        && let Some(e) = at(p)
    {
        return Some(e);
    }
    if primary {
        return None;
    }
    (0..route.members.len()).find_map(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::process_spec::Id;

    fn route(primary: i32, n: usize) -> Route {
        Route {
            members: (0..n)
                .map(|i| Id {
                    zone: "z".into(),
                    suffix: format!("b{i}"),
                })
                .collect(),
            primary,
            endpoints: (0..n).map(|i| format!("http://b{i}:8080")).collect(),
        }
    }

    #[test]
    fn updates_replace_and_empty_routes_invalidate() {
        let cache = RouteCache::new(2, Duration::from_secs(60));
        cache.update("a/j", Some(&route(0, 2)));
        assert_eq!(cache.get("a/j").unwrap().primary, 0);
        cache.update("a/j", Some(&route(1, 2)));
        assert_eq!(cache.get("a/j").unwrap().primary, 1);
        cache.update("a/j", Some(&Route::default()));
        assert!(cache.get("a/j").is_none());
        cache.update("a/j", Some(&route(0, 1)));
        cache.update("a/j", None);
        assert!(cache.get("a/j").is_none());
    }

    #[test]
    fn the_cache_is_bounded_and_entries_expire() {
        let cache = RouteCache::new(2, Duration::from_secs(60));
        for j in ["a", "b", "c"] {
            cache.update(j, Some(&route(0, 1)));
        }
        assert_eq!(cache.lock().len(), 2);
        assert!(cache.get("a").is_none(), "the oldest entry was evicted");
        let cache = RouteCache::new(2, Duration::ZERO);
        cache.update("a", Some(&route(0, 1)));
        std::thread::sleep(Duration::from_millis(2));
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn endpoints_are_picked_from_the_primary_or_any_member() {
        assert_eq!(pick_endpoint(&route(1, 2), true).unwrap(), "http://b1:8080");
        assert!(pick_endpoint(&route(-1, 2), true).is_none());
        assert_eq!(
            pick_endpoint(&route(-1, 2), false).unwrap(),
            "http://b0:8080"
        );
        let mut r = route(0, 2);
        r.endpoints[0].clear();
        assert!(pick_endpoint(&r, true).is_none());
        assert_eq!(pick_endpoint(&r, false).unwrap(), "http://b1:8080");
    }
}
