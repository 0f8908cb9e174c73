//! Names written into SQL text.
//!
//! Schema, table and column names reach statements from the configuration
//! and from the server itself (`information_schema`, when `[outbox] tables`
//! holds a pattern such as `*.outbox_event`): whoever may create a database
//! or add a column chooses them. Every name goes into a statement through
//! [`Ident`], which writes it as a quoted identifier with each backtick
//! doubled, so no name can close its quotes and add SQL of its own. Values
//! never go into SQL text: they are parameters of prepared statements.
//!
//! A name the configuration gives may not hold a backtick or a NUL at all
//! ([`configured_name`]): no outbox needs one, and refusing them keeps a
//! mistyped or pasted name from meaning something else.

use std::fmt;

/// A schema, table or column name written as a quoted identifier:
/// `` `name` ``, each backtick inside doubled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ident<'a>(pub &'a str);

impl fmt::Display for Ident<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`")?;
        for (i, part) in self.0.split('`').enumerate() {
            if i > 0 {
                f.write_str("``")?;
            }
            f.write_str(part)?;
        }
        f.write_str("`")
    }
}

/// A table in its schema: `` `schema`.`table` ``, both quoted as [`Ident`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qualified<'a>(pub &'a str, pub &'a str);

impl fmt::Display for Qualified<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", Ident(self.0), Ident(self.1))
    }
}

/// Refuses a name the configuration gives (`setting` names where) when it
/// holds a backtick or a NUL, or is empty.
pub fn configured_name(setting: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{setting} is empty: name a column or table"));
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '`' | '\0')) {
        let what = if c == '`' { "a backtick" } else { "a NUL" };
        return Err(format!(
            "{setting} = {name:?} holds {what}: names with one are refused; \
             rename the column or table"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backtick_inside_a_name_is_doubled_and_cannot_end_the_identifier() {
        assert_eq!(Ident("outbox_event").to_string(), "`outbox_event`");
        assert_eq!(Ident("out`box").to_string(), "`out``box`");
        assert_eq!(
            Qualified("x`.`t` LIMIT 0;CREATE DATABASE pwn;#", "ob").to_string(),
            "`x``.``t`` LIMIT 0;CREATE DATABASE pwn;#`.`ob`"
        );
        assert_eq!(Ident("``").to_string(), "``````");
        assert_eq!(Ident("a'b;c\"d").to_string(), "`a'b;c\"d`");
    }

    #[test]
    fn configured_names_with_a_backtick_or_nul_are_refused_with_the_setting() {
        let refused =
            configured_name("outbox.columns.event_id", "id` FROM mysql.user #").unwrap_err();
        assert!(refused.contains("outbox.columns.event_id"), "{refused}");
        assert!(refused.contains("backtick"), "{refused}");
        assert!(configured_name("retention.time_column", "created\0at")
            .unwrap_err()
            .contains("NUL"));
        assert!(configured_name("outbox.columns.payload", "").is_err());
        // A quote, a semicolon, spaces and non-ASCII are legal names.
        assert!(configured_name("outbox.tables", "o'b; ünï code").is_ok());
    }
}
