//! What the auditor knows between passes: the rows it awaits a message
//! for (and which of them it has named unproven), and the rows it proved
//! lately, which the next passes select again in their overlap and must
//! neither await nor count twice. Rows and messages meet by a [`Mark`] of
//! their table and event id.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::Instant;

use super::super::verify::RowId;

/// A row's table and event id, hashed to 128 bits with keys of this
/// process: two different rows share a mark with a chance of 2^-128, and
/// no one outside the process can make a message that takes another
/// row's mark.
pub type Mark = u128;

/// How marks are made: the same for rows and messages.
#[derive(Clone, Default)]
pub struct Marks(RandomState, RandomState);

impl Marks {
    /// The mark of the row `event_id` of `table` (`schema.table`).
    pub fn of(&self, table: &[u8], event_id: &[u8]) -> Mark {
        let high = self.0.hash_one((table, event_id));
        let low = self.1.hash_one((table, event_id));
        (u128::from(high) << 64) | u128::from(low)
    }
}

/// A selected row: who it is, where its message goes (`None`: no topic
/// can be named for it), and when it was created (seconds since the
/// epoch).
#[derive(Debug, Clone)]
pub struct Selected {
    pub id: RowId,
    pub topic: Option<String>,
    pub created_s: i64,
}

/// A row awaited: no message for it read yet.
#[derive(Debug)]
struct Awaited {
    row: Selected,
    /// The pass that selected it.
    pass: u64,
    /// When a pass first found it settled and unproven (and named it).
    named: Option<Instant>,
}

/// Rows awaited at most: beyond them (the forwarder far behind, or the
/// topics unreadable for long) rows are counted, not tracked.
pub const AWAITED_AT_MOST: usize = 100_000;

/// The rows proven by one pass, and the newest creation time among them.
#[derive(Default)]
struct Proven {
    newest_s: i64,
    marks: HashSet<Mark>,
}

#[derive(Default)]
pub struct Book {
    marks: Marks,
    awaited: HashMap<Mark, Awaited>,
    /// Passes begun.
    pass: u64,
    /// Rows created before it (seconds since the epoch) are not audited.
    floor_s: i64,
    /// Newest last.
    proven: VecDeque<Proven>,
    /// Rows selected that found no room among the awaited.
    pub untracked: u64,
}

/// What a row or a message changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Rows newly proven.
    pub proven: u64,
    /// Of them, rows named unproven before.
    pub found_after_all: Vec<RowId>,
}

impl Outcome {
    pub fn add(&mut self, other: Outcome) {
        self.proven += other.proven;
        self.found_after_all.extend(other.found_after_all);
    }
}

impl Book {
    pub fn new(marks: Marks) -> Self {
        Self {
            marks,
            ..Self::default()
        }
    }

    /// A pass begins: what it proves is kept as one generation.
    pub fn begin(&mut self) {
        self.pass += 1;
        self.proven.push_back(Proven::default());
    }

    /// The messages a pass took: the awaited rows they prove. The marks
    /// that prove one are taken out of `marks`.
    pub fn messages(&mut self, marks: &mut HashSet<Mark>) -> Outcome {
        let mut outcome = Outcome::default();
        let proven: Vec<Mark> = self
            .awaited
            .keys()
            .filter(|mark| marks.contains(*mark))
            .copied()
            .collect();
        for mark in proven {
            marks.remove(&mark);
            if let Some(awaited) = self.awaited.remove(&mark) {
                self.prove(mark, awaited, &mut outcome);
            }
        }
        outcome
    }

    /// The rows a pass selected, after it took the messages read before
    /// (`fresh`, and `older` ones no row had claimed yet): each is proven by
    /// them (its mark taken out), known already (proven or awaited), or
    /// awaited from now on.
    pub fn rows(
        &mut self,
        rows: Vec<Selected>,
        fresh: &mut HashSet<Mark>,
        older: &mut HashSet<Mark>,
    ) -> Outcome {
        let mut outcome = Outcome::default();
        for row in rows {
            let mark = self
                .marks
                .of(row.id.table.as_bytes(), row.id.event_id.as_bytes());
            if row.created_s < self.floor_s
                || self.awaited.contains_key(&mark)
                || self.proven.iter().any(|p| p.marks.contains(&mark))
            {
                continue;
            }
            let awaited = Awaited {
                row,
                pass: self.pass,
                named: None,
            };
            if fresh.remove(&mark) || older.remove(&mark) {
                self.prove(mark, awaited, &mut outcome);
            } else if self.awaited.len() < AWAITED_AT_MOST {
                self.awaited.insert(mark, awaited);
            } else {
                self.untracked += 1;
            }
        }
        outcome
    }

    fn prove(&mut self, mark: Mark, awaited: Awaited, outcome: &mut Outcome) {
        outcome.proven += 1;
        if awaited.named.is_some() {
            outcome.found_after_all.push(awaited.row.id);
        }
        if let Some(pass) = self.proven.back_mut() {
            pass.newest_s = pass.newest_s.max(awaited.row.created_s);
            pass.marks.insert(mark);
        }
    }

    /// The awaited rows that had `settle_s` to reach Kafka before `read_s`
    /// (the server's time before this pass's messages were read to the
    /// topics' ends; `created_s` is floored, so a second more), whose topic
    /// was read to its end (`read`; a row with no topic is never read),
    /// and that an earlier pass selected, so that the messages taken came
    /// after their selection: named now, in creation order. Named once each.
    pub fn settled(&mut self, read_s: i64, settle_s: i64, read: &BTreeSet<String>) -> Vec<RowId> {
        let now = Instant::now();
        let pass = self.pass;
        let mut named: Vec<&mut Awaited> = self
            .awaited
            .values_mut()
            .filter(|a| a.named.is_none() && a.pass < pass)
            .filter(|a| a.row.created_s + settle_s < read_s)
            .filter(|a| a.row.topic.as_ref().is_none_or(|t| read.contains(t)))
            .collect();
        named.sort_by(|a, b| (a.row.created_s, &a.row.id).cmp(&(b.row.created_s, &b.row.id)));
        named
            .into_iter()
            .map(|a| {
                a.named = Some(now);
                a.row.id.clone()
            })
            .collect()
    }

    /// Rows created before `floor_s` are audited no more (the marks of
    /// their messages may be lost): the awaited ones not named yet are
    /// forgotten, and how many is returned.
    pub fn unaudited_before(&mut self, floor_s: i64) -> usize {
        self.floor_s = self.floor_s.max(floor_s);
        let before = self.awaited.len();
        self.awaited
            .retain(|_, a| a.named.is_some() || a.row.created_s >= floor_s);
        before - self.awaited.len()
    }

    /// Rows found in Kafka some other way (looked for by id).
    pub fn found(&mut self, ids: &[RowId]) -> Outcome {
        let mut outcome = Outcome::default();
        for id in ids {
            let mark = self.marks.of(id.table.as_bytes(), id.event_id.as_bytes());
            if let Some(awaited) = self.awaited.remove(&mark) {
                self.prove(mark, awaited, &mut outcome);
            }
        }
        outcome
    }

    /// The next pass selects rows created from `since_s` on: the proven
    /// rows all older than it are selected no more.
    pub fn forget_before(&mut self, since_s: i64) {
        while self.proven.len() > 1 && self.proven.front().is_some_and(|p| p.newest_s < since_s) {
            self.proven.pop_front();
        }
    }

    /// The rows named unproven: how many, and when the first was named.
    pub fn unproven(&self) -> (u64, Option<Instant>) {
        let named = self.awaited.values().filter_map(|a| a.named);
        let count = named.clone().count() as u64;
        (count, named.min())
    }

    /// The topics of the rows awaited, and the oldest awaited row's
    /// creation time in each.
    pub fn topics(&self) -> BTreeMap<&str, i64> {
        let mut topics = BTreeMap::new();
        for awaited in self.awaited.values() {
            if let Some(topic) = &awaited.row.topic {
                let oldest = topics.entry(topic.as_str()).or_insert(i64::MAX);
                *oldest = (*oldest).min(awaited.row.created_s);
            }
        }
        topics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, created_s: i64) -> Selected {
        Selected {
            id: RowId::new("shop.outbox_event", id),
            topic: Some("orders".into()),
            created_s,
        }
    }

    fn marks_of(marks: &Marks, ids: &[&str]) -> HashSet<Mark> {
        ids.iter()
            .map(|id| marks.of(b"shop.outbox_event", id.as_bytes()))
            .collect()
    }

    #[test]
    fn a_row_is_proven_once_whether_its_message_comes_before_or_after_it() {
        let marks = Marks::default();
        let mut book = Book::new(marks.clone());
        let mut older = HashSet::new();
        book.begin();
        // The message of `a` was read before the pass selected it; `b`'s
        // comes later.
        let mut read = marks_of(&marks, &["a"]);
        assert_eq!(book.messages(&mut read).proven, 0);
        let rows = vec![row("a", 100), row("b", 101)];
        assert_eq!(book.rows(rows, &mut read, &mut older).proven, 1);
        assert!(read.is_empty(), "a's mark is taken");
        book.begin();
        let mut read = marks_of(&marks, &["b", "a"]);
        assert_eq!(book.messages(&mut read).proven, 1, "b, once");
        // The overlap selects both again: known, neither counts.
        let rows = vec![row("a", 100), row("b", 101)];
        assert_eq!(book.rows(rows, &mut read, &mut older).proven, 0);
        assert_eq!(book.unproven(), (0, None));
    }

    #[test]
    fn a_message_read_before_its_row_is_visible_proves_it_a_pass_later() {
        let marks = Marks::default();
        let mut book = Book::new(marks.clone());
        book.begin();
        // The message was read, but the selection did not see its row yet
        // (a replica behind, a commit not yet visible): its mark is kept
        // for the next pass.
        let mut read = marks_of(&marks, &["late"]);
        book.rows(Vec::new(), &mut read, &mut HashSet::new());
        let mut older = read;
        book.begin();
        let outcome = book.rows(vec![row("late", 100)], &mut HashSet::new(), &mut older);
        assert_eq!(outcome.proven, 1);
        assert!(older.is_empty());
    }

    #[test]
    fn a_settled_row_is_named_once_and_found_after_all() {
        let marks = Marks::default();
        let mut book = Book::new(marks.clone());
        let (mut none, mut older) = (HashSet::new(), HashSet::new());
        book.begin();
        let rows = vec![row("late", 100), row("young", 195)];
        book.rows(rows, &mut none, &mut older);
        let read: BTreeSet<String> = ["orders".to_string()].into();
        // Not named by the pass that selected it: the messages it took
        // were read before the selection.
        assert!(book.settled(200, 60, &read).is_empty());
        book.begin();
        // Not while its topic has not been read to its end, nor before it
        // had the settle delay and the second its time was floored by.
        assert!(book.settled(200, 60, &BTreeSet::new()).is_empty());
        assert!(book.settled(160, 60, &read).is_empty());
        let named = book.settled(200, 60, &read);
        assert_eq!(named, vec![RowId::new("shop.outbox_event", "late")]);
        assert!(book.settled(200, 60, &read).is_empty(), "named once");
        assert_eq!(book.unproven().0, 1);
        book.begin();
        let outcome = book.messages(&mut marks_of(&marks, &["late"]));
        assert_eq!(outcome.proven, 1);
        assert_eq!(outcome.found_after_all, named);
        assert_eq!(book.unproven().0, 0);
    }

    #[test]
    fn proven_rows_are_forgotten_once_older_than_the_next_selection() {
        let marks = Marks::default();
        let mut book = Book::new(marks.clone());
        let mut older = HashSet::new();
        let read = || marks_of(&marks, &["a"]);
        book.begin();
        book.rows(vec![row("a", 100)], &mut read(), &mut older);
        book.begin();
        book.forget_before(100);
        let outcome = book.rows(vec![row("a", 100)], &mut read(), &mut older);
        assert_eq!(outcome.proven, 0, "kept");
        book.begin();
        book.forget_before(101);
        // Selected again after all (it cannot be, by its time): counted.
        let outcome = book.rows(vec![row("a", 100)], &mut read(), &mut older);
        assert_eq!(outcome.proven, 1);
    }

    #[test]
    fn rows_before_the_floor_are_no_longer_awaited_nor_selected() {
        let marks = Marks::default();
        let mut book = Book::new(marks);
        let (mut none, mut older) = (HashSet::new(), HashSet::new());
        book.begin();
        book.rows(vec![row("a", 100), row("b", 200)], &mut none, &mut older);
        assert_eq!(book.unaudited_before(150), 1);
        book.begin();
        book.rows(vec![row("c", 120)], &mut none, &mut older);
        assert_eq!(book.topics().get("orders"), Some(&200), "only b waits");
    }

    #[test]
    fn rows_beyond_the_room_are_counted_not_awaited() {
        let mut book = Book::new(Marks::default());
        book.begin();
        let rows = (0..AWAITED_AT_MOST + 3)
            .map(|i| row(&i.to_string(), 1))
            .collect();
        book.rows(rows, &mut HashSet::new(), &mut HashSet::new());
        assert_eq!(book.untracked, 3);
        assert_eq!(book.topics().get("orders"), Some(&1));
    }
}
