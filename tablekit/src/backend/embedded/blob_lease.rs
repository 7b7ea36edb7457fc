//! Leases of the embedded blob store: the Blob service's lease states
//! (available, leased, expired, breaking, broken) for blobs and containers,
//! worked out against the store's clock at each request, so a test moves a
//! [`ManualClock`](crate::clock::ManualClock) past a lease's end instead of waiting.
//! The codes and statuses are those of the service (and of Azurite).

use chrono::{DateTime, Duration, Utc};
#[cfg(feature = "durable")]
use serde::{Deserialize, Serialize};

use crate::backend::blob::{BlobResponse, LeaseAction, LeaseInfo, LeaseState};
use crate::error::{Error, ErrorCode, Result};

/// A lease as stored: its times are absolute, so it expires (or finishes
/// breaking) by itself as the clock moves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "durable", derive(Serialize, Deserialize))]
pub(super) struct Lease {
    /// The id of the lease, kept after it expires or is broken (a renew or a
    /// release may still name it).
    id: Option<String>,
    stored: Stored,
    /// A fixed lease's duration in seconds, for a renew after it expired.
    seconds: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "durable", derive(Serialize, Deserialize))]
enum Stored {
    #[default]
    Available,
    /// Held until then (milliseconds since the Unix epoch), or forever.
    Leased {
        until: Option<i64>,
    },
    /// Held until then, and broken from then on.
    Breaking {
        until: i64,
    },
    Broken,
}

/// The state at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Now {
    Available,
    Leased { infinite: bool },
    Expired,
    Breaking { until: i64 },
    Broken,
}

/// What a lease guards: the operation names its codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Guarded {
    Blob,
    Container,
}

fn err(status: u16, code: &str, message: &str) -> Error {
    Error::service(status, ErrorCode::from(code), message)
}

fn mismatch_with_lease_operation() -> Error {
    err(
        409,
        "LeaseIdMismatchWithLeaseOperation",
        "The lease ID specified did not match the lease ID for the blob.",
    )
}

fn not_present_with_lease_operation() -> Error {
    err(
        409,
        "LeaseNotPresentWithLeaseOperation",
        "There is currently no lease on the blob.",
    )
}

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

impl Lease {
    fn now(&self, now: DateTime<Utc>) -> Now {
        let now = millis(now);
        match self.stored {
            Stored::Available => Now::Available,
            Stored::Leased { until: None } => Now::Leased { infinite: true },
            Stored::Leased { until: Some(t) } if now < t => Now::Leased { infinite: false },
            Stored::Leased { .. } => Now::Expired,
            Stored::Breaking { until } if now < until => Now::Breaking { until },
            Stored::Breaking { .. } | Stored::Broken => Now::Broken,
        }
    }

    fn held_id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// The lease as a reader sees it at `now`.
    pub(super) fn info(&self, now: DateTime<Utc>) -> LeaseInfo {
        let (state, infinite) = match self.now(now) {
            Now::Available => (LeaseState::Available, None),
            Now::Leased { infinite } => (LeaseState::Leased, Some(infinite)),
            Now::Expired => (LeaseState::Expired, None),
            Now::Breaking { .. } => (LeaseState::Breaking, None),
            Now::Broken => (LeaseState::Broken, None),
        };
        LeaseInfo { state, infinite }
    }

    /// The lease after a write to its blob: one that expired or was broken
    /// is gone (it can no longer be renewed or released), as the service does.
    pub(super) fn after_write(&self, now: DateTime<Utc>) -> Lease {
        match self.now(now) {
            Now::Expired | Now::Broken => Lease::default(),
            _ => self.clone(),
        }
    }

    /// A write, delete or metadata set naming `given` (or no lease): refused
    /// without the id while a lease is held, or with an id when none is.
    pub(super) fn check_write(
        &self,
        now: DateTime<Utc>,
        given: Option<&str>,
        what: Guarded,
    ) -> Result<()> {
        let thing = match what {
            Guarded::Blob => "blob",
            Guarded::Container => "container",
        };
        let locked = matches!(self.now(now), Now::Leased { .. } | Now::Breaking { .. });
        match given {
            None if locked => Err(err(
                412,
                "LeaseIdMissing",
                &format!(
                    "There is currently a lease on the {thing} and no lease ID was specified in the request."
                ),
            )),
            None => Ok(()),
            Some(id) if locked && same(id, self.held_id()) => Ok(()),
            Some(_) if locked => Err(match what {
                Guarded::Blob => err(
                    412,
                    "LeaseIdMismatchWithBlobOperation",
                    "The lease ID specified did not match the lease ID for the blob.",
                ),
                Guarded::Container => err(
                    412,
                    "LeaseIdMismatchWithContainerOperation",
                    "The lease ID specified did not match the lease ID for the container.",
                ),
            }),
            Some(_) => Err(match what {
                Guarded::Blob => err(
                    412,
                    "LeaseNotPresentWithBlobOperation",
                    "A lease ID was specified, but the lease for the blob has expired.",
                ),
                Guarded::Container => err(
                    412,
                    "LeaseNotPresentWithContainerOperation",
                    "A lease ID was specified, but the lease for the container has expired.",
                ),
            }),
        }
    }

    fn leased(id: &str, seconds: Option<u32>, now: DateTime<Utc>) -> Lease {
        Lease {
            id: Some(id.to_owned()),
            stored: Stored::Leased {
                until: seconds.map(|s| millis(now + Duration::seconds(i64::from(s)))),
            },
            seconds,
        }
    }

    /// Carries out a lease call at `now`: the lease afterwards, and the answer.
    pub(super) fn act(
        &self,
        now: DateTime<Utc>,
        action: LeaseAction<'_>,
    ) -> Result<(Lease, BlobResponse)> {
        let answer = |id: &str| BlobResponse::Lease {
            id: Some(id.to_owned()),
            break_seconds: None,
        };
        let state = self.now(now);
        match action {
            LeaseAction::Acquire { seconds, proposed } => {
                if let Some(s) = seconds {
                    if !(15..=60).contains(&s) {
                        return Err(err(
                            400,
                            "InvalidHeaderValue",
                            "The value for one of the HTTP headers is not in the correct format.",
                        ));
                    }
                }
                match state {
                    Now::Leased { .. } if !same(proposed, self.held_id()) => Err(err(
                        409,
                        "LeaseAlreadyPresent",
                        "There is already a lease present.",
                    )),
                    Now::Breaking { .. } if same(proposed, self.held_id()) => Err(err(
                        409,
                        "LeaseIsBreakingAndCannotBeAcquired",
                        "There is already a breaking lease, and can't be acquired.",
                    )),
                    Now::Breaking { .. } => Err(err(
                        409,
                        "LeaseAlreadyPresent",
                        "There is already a lease present.",
                    )),
                    _ => Ok((Lease::leased(proposed, seconds, now), answer(proposed))),
                }
            }
            LeaseAction::Renew { id } => match state {
                _ if !same(id, self.held_id()) => Err(mismatch_with_lease_operation()),
                Now::Available => Err(mismatch_with_lease_operation()),
                Now::Leased { .. } | Now::Expired => {
                    Ok((Lease::leased(self.held_id(), self.seconds, now), answer(id)))
                }
                Now::Breaking { .. } | Now::Broken => Err(err(
                    409,
                    "LeaseIsBrokenAndCannotBeRenewed",
                    "The lease ID matched, but the lease has been broken explicitly and cannot be renewed.",
                )),
            },
            LeaseAction::Change { id, proposed } => match state {
                Now::Leased { .. }
                    if same(id, self.held_id()) || same(proposed, self.held_id()) =>
                {
                    let mut changed = self.clone();
                    changed.id = Some(proposed.to_owned());
                    Ok((changed, answer(proposed)))
                }
                Now::Breaking { .. }
                    if same(id, self.held_id()) || same(proposed, self.held_id()) =>
                {
                    Err(err(
                        409,
                        "LeaseIsBreakingAndCannotBeChanged",
                        "The lease ID matched, but the lease is currently in breaking state and cannot be changed.",
                    ))
                }
                Now::Leased { .. } | Now::Breaking { .. } => Err(mismatch_with_lease_operation()),
                Now::Available | Now::Expired | Now::Broken => {
                    Err(not_present_with_lease_operation())
                }
            },
            LeaseAction::Release { id } => {
                if state == Now::Available || !same(id, self.held_id()) {
                    return Err(mismatch_with_lease_operation());
                }
                Ok((
                    Lease::default(),
                    BlobResponse::Lease {
                        id: None,
                        break_seconds: None,
                    },
                ))
            }
            LeaseAction::Break { period } => {
                let at = |s: u32| millis(now + Duration::seconds(i64::from(s)));
                let until = match (state, period) {
                    (Now::Available, _) => return Err(not_present_with_lease_operation()),
                    (Now::Expired | Now::Broken, _) | (_, Some(0)) => None,
                    (Now::Leased { infinite: true }, None) => None,
                    (Now::Leased { infinite: true }, Some(p)) => Some(at(p)),
                    (Now::Leased { infinite: false }, p) => {
                        let Stored::Leased { until: Some(end) } = self.stored else {
                            unreachable!("a fixed lease has an end")
                        };
                        Some(p.map_or(end, |p| end.min(at(p))))
                    }
                    (Now::Breaking { until }, None) => Some(until),
                    (Now::Breaking { until }, Some(p)) => Some(until.min(at(p))),
                };
                let broken = Lease {
                    id: self.id.clone(),
                    stored: match until {
                        Some(until) => Stored::Breaking { until },
                        None => Stored::Broken,
                    },
                    seconds: None,
                };
                let left = until.map_or(0, |u| ((u - millis(now)).max(0) + 999) / 1000);
                Ok((
                    broken,
                    BlobResponse::Lease {
                        id: None,
                        break_seconds: Some(u32::try_from(left).unwrap_or(u32::MAX)),
                    },
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_400_000_000 + secs, 0).unwrap()
    }

    const A: &str = "00000000-0000-0000-0000-00000000000a";
    const B: &str = "00000000-0000-0000-0000-00000000000b";

    fn acquire(l: &Lease, at: i64, seconds: Option<u32>, id: &str) -> Result<Lease> {
        l.act(
            t(at),
            LeaseAction::Acquire {
                seconds,
                proposed: id,
            },
        )
        .map(|(l, _)| l)
    }

    fn code(e: Error) -> String {
        e.code().unwrap().as_str().to_owned()
    }

    #[test]
    fn a_fixed_lease_expires_by_the_clock_and_can_be_renewed_after() {
        let l = acquire(&Lease::default(), 0, Some(15), A).unwrap();
        assert_eq!(l.info(t(14)).state(), LeaseState::Leased);
        assert_eq!(l.info(t(14)).is_infinite(), Some(false));
        l.check_write(t(14), Some(A), Guarded::Blob).unwrap();
        assert_eq!(
            code(l.check_write(t(14), None, Guarded::Blob).unwrap_err()),
            "LeaseIdMissing"
        );
        assert_eq!(l.info(t(15)).state(), LeaseState::Expired);
        l.check_write(t(15), None, Guarded::Blob).unwrap();
        assert_eq!(
            code(l.check_write(t(15), Some(A), Guarded::Blob).unwrap_err()),
            "LeaseNotPresentWithBlobOperation"
        );
        let (renewed, _) = l.act(t(20), LeaseAction::Renew { id: A }).unwrap();
        assert_eq!(renewed.info(t(34)).state(), LeaseState::Leased);
        assert_eq!(renewed.info(t(35)).state(), LeaseState::Expired);
        // Someone else may take an expired lease.
        acquire(&l, 16, None, B).unwrap();
        // A write after it ran out ends it: no renewing then.
        assert_eq!(l.after_write(t(14)), l);
        let written = l.after_write(t(15));
        assert_eq!(written, Lease::default());
        let renew = written
            .act(t(16), LeaseAction::Renew { id: A })
            .unwrap_err();
        assert_eq!(code(renew), "LeaseIdMismatchWithLeaseOperation");
    }

    #[test]
    fn a_held_lease_refuses_others_and_breaks_after_its_period() {
        let l = acquire(&Lease::default(), 0, None, A).unwrap();
        assert_eq!(
            code(acquire(&l, 1, Some(30), B).unwrap_err()),
            "LeaseAlreadyPresent"
        );
        assert_eq!(
            code(
                l.check_write(t(1), Some(B), Guarded::Container)
                    .unwrap_err()
            ),
            "LeaseIdMismatchWithContainerOperation"
        );
        // Acquiring again with the same id changes the duration.
        let again = acquire(&l, 1, Some(15), A).unwrap();
        assert_eq!(again.info(t(16)).state(), LeaseState::Expired);

        let (breaking, answer) = l
            .act(t(10), LeaseAction::Break { period: Some(20) })
            .unwrap();
        assert!(matches!(
            answer,
            BlobResponse::Lease {
                break_seconds: Some(20),
                ..
            }
        ));
        assert_eq!(breaking.info(t(29)).state(), LeaseState::Breaking);
        breaking.check_write(t(29), Some(A), Guarded::Blob).unwrap();
        let renew = breaking
            .act(t(29), LeaseAction::Renew { id: A })
            .unwrap_err();
        assert_eq!(code(renew), "LeaseIsBrokenAndCannotBeRenewed");
        assert_eq!(breaking.info(t(30)).state(), LeaseState::Broken);
        breaking.check_write(t(30), None, Guarded::Blob).unwrap();
        acquire(&breaking, 30, Some(60), B).unwrap();

        let (released, _) = l.act(t(2), LeaseAction::Release { id: A }).unwrap();
        assert_eq!(released, Lease::default());
        let err = released
            .act(t(3), LeaseAction::Release { id: A })
            .unwrap_err();
        assert_eq!(code(err), "LeaseIdMismatchWithLeaseOperation");
    }

    #[test]
    fn change_moves_the_lease_to_the_new_id() {
        let l = acquire(&Lease::default(), 0, Some(60), A).unwrap();
        let (changed, _) = l
            .act(t(1), LeaseAction::Change { id: A, proposed: B })
            .unwrap();
        changed.check_write(t(2), Some(B), Guarded::Blob).unwrap();
        assert!(changed.check_write(t(2), Some(A), Guarded::Blob).is_err());
        // Repeating the change (a retry) is a no-op.
        changed
            .act(t(2), LeaseAction::Change { id: A, proposed: B })
            .unwrap();
        let err = Lease::default()
            .act(t(0), LeaseAction::Change { id: A, proposed: B })
            .unwrap_err();
        assert_eq!(code(err), "LeaseNotPresentWithLeaseOperation");
        // A fixed lease broken without a period breaks when it would have ended.
        let (b, _) = l.act(t(10), LeaseAction::Break { period: None }).unwrap();
        assert_eq!(b.info(t(59)).state(), LeaseState::Breaking);
        assert_eq!(b.info(t(60)).state(), LeaseState::Broken);
    }
}
