//! Cancellation of work whose caller has gone (a client that disconnected, a request that
//! timed out): checked by the engine at batch boundaries, so abandoned work stops within one
//! model call instead of delaying everyone queued behind it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{Error, ErrorKind, Result};

/// A cheap, clonable "has the caller gone?" question. [`Cancel::default`] never cancels.
/// Compares equal to every other `Cancel` (it is not part of what options mean).
#[derive(Clone, Default)]
pub struct Cancel(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl Cancel {
    /// Cancelled once `f` returns true.
    pub fn from_fn(f: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(f)))
    }

    /// Cancelled once `flag` is set.
    pub fn from_flag(flag: Arc<AtomicBool>) -> Self {
        Self::from_fn(move || flag.load(Ordering::Acquire))
    }

    /// Cancelled once every one of `parts` is (work shared by several callers stops only when
    /// all of them have gone). No parts: never cancelled.
    pub fn all(parts: Vec<Cancel>) -> Self {
        if parts.is_empty() || parts.iter().any(|p| p.0.is_none()) {
            return Self::default();
        }
        Self::from_fn(move || parts.iter().all(Cancel::is_cancelled))
    }

    /// Whether the caller has gone.
    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f())
    }

    /// `Err(Timeout)` once cancelled, for `?` at a batch boundary.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::new(
                ErrorKind::Timeout,
                "cancelled: the caller left (disconnected or timed out) before the work finished",
            ))
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Cancel(..)"
        } else {
            "Cancel(never)"
        })
    }
}

impl PartialEq for Cancel {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_check_is_typed() {
        let (a, b) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let both = Cancel::all(vec![
            Cancel::from_flag(a.clone()),
            Cancel::from_flag(b.clone()),
        ]);
        assert!(!both.is_cancelled() && both.check().is_ok());
        a.store(true, Ordering::Release);
        assert!(!both.is_cancelled(), "one caller is still there");
        b.store(true, Ordering::Release);
        assert!(both.is_cancelled());
        assert_eq!(both.check().unwrap_err().kind, ErrorKind::Timeout);
        assert!(!Cancel::default().is_cancelled());
        assert!(!Cancel::all(vec![Cancel::default(), Cancel::from_flag(a)]).is_cancelled());
    }
}
