//! QUERY events: transaction boundaries (BEGIN, COMMIT, XA, DDL) and
//! outbox rows written as statements, which cannot be published.

use mysql_common::binlog::consts::EventType;
use outbox_core::{ChangePolicy, DefiniteError, SourceTransaction};

use outbox_core::table::TablePattern;

use super::TransactionAssembler;

impl TransactionAssembler {
    pub(super) fn on_query(
        &mut self,
        query: &str,
    ) -> Result<Option<SourceTransaction>, DefiniteError> {
        match Statement::classify(query) {
            Statement::Begin => {
                self.begin()?;
                Ok(None)
            }
            Statement::Commit => Ok(self.commit()),
            Statement::Rollback => {
                // Only non-transactional changes survive a logged ROLLBACK;
                // any outbox rows in the group were undone.
                self.discard();
                Ok(self.commit())
            }
            Statement::Savepoint(name) => {
                let marks = (self.events.len(), self.dead_letters.len());
                self.savepoints.insert(name.to_owned(), marks);
                Ok(None)
            }
            Statement::RollbackToSavepoint(name) => {
                let Some(&(events, dead_letters)) = self.savepoints.get(name) else {
                    return Err(self.unsupported(
                        EventType::QUERY_EVENT as u8,
                        format!("ROLLBACK TO SAVEPOINT {name} without a logged SAVEPOINT {name}"),
                    ));
                };
                self.events.truncate(events);
                self.dead_letters.truncate(dead_letters);
                Ok(None)
            }
            Statement::Insert => match self.outbox_table_named_in(query) {
                Some(pattern) => Err(self.unsupported(
                    EventType::QUERY_EVENT as u8,
                    format!(
                        "an insert into outbox table {pattern} was logged as a statement \
                         (binlog_format STATEMENT or MIXED in some session); its rows cannot \
                         be read. Set binlog_format=ROW globally and for every session that \
                         writes the outbox, write this transaction's outbox rows again, then \
                         move the checkpoint past it (`outbox-forwarder checkpoint set`)"
                    ),
                )),
                None => Ok(None),
            },
            Statement::Change(change) => self.on_changing_statement(query, change),
            Statement::Dummy => Ok(None),
            // Statements inside a transaction (XA END, SET ...) carry no rows.
            Statement::Other if self.in_transaction => Ok(None),
            // DDL and other self-committing statements: a boundary.
            Statement::Other => Ok(Some(self.boundary())),
        }
    }

    /// An UPDATE or DELETE logged as a statement: when it names an outbox
    /// table, `on_update` / `on_delete` apply to it as to rows events (its
    /// rows cannot be read, so no event id is known).
    fn on_changing_statement(
        &mut self,
        query: &str,
        change: &'static str,
    ) -> Result<Option<SourceTransaction>, DefiniteError> {
        if self.change_policy(change).1 != ChangePolicy::Ignore {
            if let Some(pattern) = self.outbox_table_named_in(query) {
                let table = pattern.to_string();
                self.outbox_rows_changed(change, table, None, 1, " logged as a statement")?;
            }
        }
        Ok((!self.in_transaction).then(|| self.boundary()))
    }

    /// The outbox table pattern whose table name `query` mentions, if any
    /// (a statement's text is not parsed: naming it is enough to refuse).
    pub(super) fn outbox_table_named_in(&self, query: &str) -> Option<&TablePattern> {
        let query = query.to_ascii_lowercase();
        self.config
            .tables
            .patterns()
            .iter()
            .find(|pattern| query.contains(&pattern.table.to_ascii_lowercase()))
    }
}

/// What a QUERY event means for transaction boundaries.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Statement<'a> {
    Begin,
    Commit,
    Rollback,
    Savepoint(&'a str),
    RollbackToSavepoint(&'a str),
    /// INSERT / REPLACE logged as a statement.
    Insert,
    /// UPDATE or DELETE logged as a statement.
    Change(&'static str),
    /// MariaDB's placeholder for events a client did not ask for.
    Dummy,
    Other,
}

impl<'a> Statement<'a> {
    pub(super) fn classify(query: &'a str) -> Self {
        if query.trim_start().starts_with("# Dummy event") {
            return Statement::Dummy;
        }
        let query = skip_leading_comments(query);
        let mut words = query.split_whitespace().map(|w| w.trim_end_matches(';'));
        let mut next = || words.next().unwrap_or("");
        let first = next().to_ascii_uppercase();
        match first.as_str() {
            "BEGIN" => Statement::Begin,
            "COMMIT" => Statement::Commit,
            "SAVEPOINT" => Statement::Savepoint(next()),
            "INSERT" | "REPLACE" => Statement::Insert,
            "UPDATE" => Statement::Change("UPDATE"),
            "DELETE" => Statement::Change("DELETE"),
            "ROLLBACK" => {
                let second = next();
                if second.eq_ignore_ascii_case("TO") {
                    let name = next();
                    let name = if name.eq_ignore_ascii_case("SAVEPOINT") {
                        next()
                    } else {
                        name
                    };
                    Statement::RollbackToSavepoint(name)
                } else {
                    Statement::Rollback
                }
            }
            "START" if next().eq_ignore_ascii_case("TRANSACTION") => Statement::Begin,
            "XA" => match next().to_ascii_uppercase().as_str() {
                "START" | "BEGIN" => Statement::Begin,
                // One-phase XA commits like COMMIT; a prepared XA
                // transaction's rows were refused at XA PREPARE.
                "COMMIT" => Statement::Commit,
                "ROLLBACK" => Statement::Rollback,
                _ => Statement::Other,
            },
            _ => Statement::Other,
        }
    }
}

/// `query` after its leading whitespace and comments (`/* ... */`, `-- ...`,
/// `# ...`): applications and ORMs tag statements with them, and the
/// statement's own first word decides what it is. The text of a versioned
/// comment (`/*!80000 ... */`, `/*M!100100 ... */`) is executed by the
/// server, so it is read as the statement.
pub(super) fn skip_leading_comments(query: &str) -> &str {
    let mut rest = query.trim_start();
    loop {
        if let Some(body) = rest.strip_prefix("/*") {
            let versioned = body.strip_prefix('!').or_else(|| body.strip_prefix("M!"));
            if let Some(code) = versioned {
                rest = code.trim_start_matches(|c: char| c.is_ascii_digit());
                rest = rest.trim_start();
                continue;
            }
            let Some(end) = body.find("*/") else {
                return "";
            };
            rest = body[end + 2..].trim_start();
        } else if rest.starts_with('#')
            || (rest.starts_with("--") && rest[2..].starts_with(|c: char| c.is_whitespace()))
        {
            rest = rest
                .find('\n')
                .map_or("", |end| rest[end + 1..].trim_start());
        } else {
            return rest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Statement::{self, *};

    #[test]
    fn statements_are_classified_by_whole_words() {
        let cases: [(&str, Statement<'_>); 22] = [
            ("/* svc */ UPDATE outbox_event SET x = 1", Change("UPDATE")),
            ("delete FROM outbox_event", Change("DELETE")),
            (
                "/* app=checkout */ INSERT INTO outbox_event VALUES (1)",
                Insert,
            ),
            (
                "  /* a */ /* b */\nINSERT INTO outbox_event VALUES (1)",
                Insert,
            ),
            ("-- tagged\nINSERT INTO outbox_event VALUES (1)", Insert),
            ("# tagged\n  replace INTO outbox_event VALUES (1)", Insert),
            ("/*!80000 INSERT INTO outbox_event VALUES (1) */", Insert),
            ("/*M!100100 INSERT INTO outbox_event VALUES (1) */", Insert),
            ("/* app */ BEGIN", Begin),
            ("/* unterminated INSERT INTO outbox_event", Other),
            ("BEGIN", Begin),
            ("  commit", Commit),
            ("ROLLBACK", Rollback),
            ("ROLLBACK TO SAVEPOINT `sp1`", RollbackToSavepoint("`sp1`")),
            ("ROLLBACK TO sp1", RollbackToSavepoint("sp1")),
            ("SAVEPOINT `sp1`", Savepoint("`sp1`")),
            ("XA START X'01',X'',1", Begin),
            ("XA COMMIT X'01',X'',1 ONE PHASE", Commit),
            ("XA END X'01',X'',1", Other),
            ("INSERT INTO outbox_event VALUES (1)", Insert),
            ("# Dummy event replacing event type 160", Dummy),
            ("DROP TABLE `übersicht` /* generated by server */", Other),
        ];
        for (query, expected) in cases {
            assert_eq!(Statement::classify(query), expected, "{query}");
        }
    }
}
