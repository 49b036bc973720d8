//! Copying a session's output out of its buffer a page at a time, one short lock per page
//! (a search or a copy of megabytes never holds the session): the one way code outside the
//! state reads more than a page.

use super::Session;
use crate::limits::{PAGE_MAX_ENTRIES, SEARCH_STEP_BYTES};
use crate::output::{Page, ReadError};

/// What to do when the next page was evicted before it was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Evicted {
    /// Go on from the oldest output still retained.
    Skip,
    /// Stop with `ReadError::Expired`.
    Fail,
}

pub(super) struct Pages<'a> {
    session: &'a Session,
    cursor: u64,
    on_evicted: Evicted,
    done: bool,
}

impl Session {
    /// The retained output from `cursor` on, a page per lock, until a page has nothing
    /// after it.
    pub(super) fn pages(&self, cursor: u64, on_evicted: Evicted) -> Pages<'_> {
        Pages {
            session: self,
            cursor,
            on_evicted,
            done: false,
        }
    }
}

impl Iterator for Pages<'_> {
    type Item = Result<Page, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (cursor, on_evicted) = (self.cursor, self.on_evicted);
        let page = self.session.inspect(|s| {
            let output = s.output();
            let from = match on_evicted {
                Evicted::Skip => cursor.max(output.base()),
                Evicted::Fail => cursor,
            };
            output.read(from, SEARCH_STEP_BYTES, PAGE_MAX_ENTRIES)
        });
        match &page {
            Ok(page) => {
                self.done = !page.has_more || page.next_cursor <= self.cursor;
                self.cursor = page.next_cursor;
            }
            Err(_) => self.done = true,
        }
        Some(page)
    }
}
