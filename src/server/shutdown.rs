//! Graceful shutdown of the webhook listener, in the order a rolling update
//! needs it.
//!
//! 1. **Draining** (from SIGTERM, for `--shutdown-delay-secs`): `/readyz`
//!    answers 503, so the pod leaves its Service's endpoints, but the
//!    listener keeps accepting: kube-proxy and load balancers go on sending
//!    new connections to a terminating pod for a few seconds, and refusing
//!    them would fail the API server's calls. Every HTTP/1.1 response now
//!    carries `Connection: close` and every HTTP/2 connection gets GOAWAY,
//!    so clients move to another replica after the reviews they have sent.
//! 2. **Closing**: the listener is closed (a new connection is refused at
//!    once), idle keep-alive connections are closed, and every review
//!    already read is answered, including those on connections the kernel
//!    had accepted but no worker had picked up yet.
//! 3. The process exits as soon as no connection is left, or when
//!    `--shutdown-timeout-secs` have passed since closing began, closing
//!    whatever is still open.
//!
//! SIGINT (Ctrl-C at a terminal) skips the drain delay; a second signal
//! ends the wait at once.

use tokio::sync::watch;

/// Where the server is in its shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Ready and accepting.
    Serving,
    /// Not ready, still accepting; connections are asked to move.
    Draining,
    /// No longer accepting; the reviews already read are being answered.
    Closing,
}

/// The shutdown phase, shared by the signal handling, `/readyz` and every
/// connection of the webhook listener.
#[derive(Debug)]
pub struct Shutdown {
    phase: watch::Sender<Phase>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            phase: watch::Sender::new(Phase::Serving),
        }
    }
}

impl Shutdown {
    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// True from the start of the drain on: not ready, connections asked
    /// to move.
    pub fn has_begun(&self) -> bool {
        self.phase() >= Phase::Draining
    }

    /// Moves on to `phase`; never back.
    pub fn advance(&self, phase: Phase) {
        self.phase.send_if_modified(|current| {
            let later = *current < phase;
            if later {
                *current = phase;
            }
            later
        });
    }

    /// Resolves once the shutdown has reached `phase` (at once if it has).
    pub async fn reached(&self, phase: Phase) {
        let mut phases = self.phase.subscribe();
        // The sender lives as long as `self`, so this cannot fail while
        // anyone waits on it.
        let _ = phases.wait_for(|current| *current >= phase).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_only_move_forward() {
        let shutdown = Shutdown::default();
        assert_eq!(shutdown.phase(), Phase::Serving);
        assert!(!shutdown.has_begun());
        shutdown.advance(Phase::Closing);
        shutdown.advance(Phase::Draining);
        assert_eq!(shutdown.phase(), Phase::Closing);
        assert!(shutdown.has_begun());
    }

    #[test]
    fn waiting_for_a_phase_already_reached_returns_at_once() {
        let shutdown = Shutdown::default();
        shutdown.advance(Phase::Draining);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                shutdown.reached(Phase::Draining),
            )
            .await
            .expect("already draining");
        });
    }
}
