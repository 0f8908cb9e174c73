//! A configuration file with any of its settings overridden from the
//! environment, for deployments that keep one file (a ConfigMap, an image's
//! default) and vary a few keys per environment.
//!
//! `PREFIX__SECTION__KEY=value` sets `section.key`: the name after the
//! prefix is split at each `__`, and each part lowercased
//! (`OUTBOX_FORWARDER__KAFKA__BROKERS` sets `kafka.brokers`). A key with dots
//! of its own, as librdkafka's properties have, is written with them
//! (`OUTBOX_FORWARDER__KAFKA__PROPERTIES__SASL.MECHANISM`: Kubernetes and
//! compose take such names; from a shell, `env` sets them).
//!
//! A value is read as TOML when it is one (`5`, `true`, `["a", "b"]`,
//! `{ region = "eu-west-2" }`) and as a string otherwise; where the setting
//! wants a string, a value that read as another type is taken as written.
//! An inline table is merged into the file's table of that name, key by
//! key. Overrides are as strict as the file: an unknown key, a value of the
//! wrong type, an empty value and two variables naming one key are refused,
//! naming the variable (never its value). The result lists each override
//! with its value masked where it may hold a secret, so that `check` can
//! say which value came from where.

use serde::de::DeserializeOwned;

/// The separator between the parts of a variable's name.
const SEPARATOR: &str = "__";

/// Words in a key that name a secret: its value is never shown.
const SECRET_WORDS: [&str; 5] = ["password", "secret", "token", "key", "credential"];

/// A setting taken from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// The variable's name.
    pub variable: String,
    /// The setting, dotted (`kafka.brokers`).
    pub key: String,
    /// The value as it may be shown: masked when the key names a secret,
    /// a URL's password masked.
    pub shown: String,
}

/// A configuration and the settings the environment gave it.
#[derive(Debug)]
pub struct Settings<T> {
    pub config: T,
    pub overrides: Vec<Override>,
}

/// One override before it is applied: its path and both readings of its
/// value.
struct Pending {
    variable: String,
    path: Vec<String>,
    typed: Option<toml::Value>,
    text: String,
}

/// The process's environment, as [`parse`] takes it; a name or value that
/// is not UTF-8 is read with its invalid bytes replaced (no setting's name
/// has any).
pub fn process_environment() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().map(|(name, value)| {
        let text = |s: std::ffi::OsString| s.to_string_lossy().into_owned();
        (text(name), text(value))
    })
}

/// `text` (a TOML document, `origin` naming it in errors) with the
/// variables of `env` that start with `prefix` and [`SEPARATOR`] applied.
pub fn parse<T: DeserializeOwned>(
    text: &str,
    origin: &str,
    prefix: &str,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Settings<T>, String> {
    let lead = format!("{prefix}{SEPARATOR}");
    let mut pending: Vec<Pending> = env
        .into_iter()
        .filter_map(|(name, value)| {
            let rest = name.strip_prefix(&lead)?.to_owned();
            Some((name, rest, value))
        })
        .map(|(variable, rest, text)| {
            let path: Vec<String> = rest.split(SEPARATOR).map(str::to_lowercase).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!(
                    "{variable}: an empty key between `{SEPARATOR}`s; name a setting as \
                     {lead}SECTION{SEPARATOR}KEY"
                ));
            }
            if text.trim().is_empty() {
                return Err(format!(
                    "{variable} is set but empty: unset it, or give the value"
                ));
            }
            let typed = toml::from_str::<toml::Table>(&format!("v = {text}"))
                .ok()
                .filter(|t| t.len() == 1)
                .and_then(|mut t| t.remove("v"))
                .filter(|v| !v.is_str());
            Ok(Pending {
                variable,
                path,
                typed,
                text,
            })
        })
        .collect::<Result<_, _>>()?;
    pending.sort_by(|a, b| a.variable.cmp(&b.variable));
    // One key set twice, or a table set beside a key inside it: which
    // value would win is not for the order of names to decide.
    for (i, p) in pending.iter().enumerate() {
        if let Some(twin) = pending[..i]
            .iter()
            .find(|q| q.path.starts_with(&p.path) || p.path.starts_with(&q.path))
        {
            return Err(format!(
                "{} and {} both set {}: keep one",
                twin.variable,
                p.variable,
                p.path.join(".").min(twin.path.join("."))
            ));
        }
    }
    if pending.is_empty() {
        let config = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        return Ok(Settings {
            config,
            overrides: Vec::new(),
        });
    }
    let file: toml::Table = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
    let config = apply(file, origin, &mut pending)?;
    let overrides = pending
        .iter()
        .map(|p| Override {
            variable: p.variable.clone(),
            key: p.path.join("."),
            shown: shown(&p.path, p.typed.as_ref(), &p.text),
        })
        .collect();
    Ok(Settings { config, overrides })
}

/// `file` with `pending` applied, deserialized. An override read as TOML
/// that the setting refuses is tried again as the string it was written as.
fn apply<T: DeserializeOwned>(
    file: toml::Table,
    origin: &str,
    pending: &mut [Pending],
) -> Result<T, String> {
    loop {
        let mut table = file.clone();
        for p in pending.iter() {
            let value = p
                .typed
                .clone()
                .unwrap_or_else(|| toml::Value::String(p.text.clone()));
            set(&mut table, &p.path, value).map_err(|why| format!("{}: {why}", p.variable))?;
        }
        let error = match serde_path_to_error::deserialize(toml::Value::Table(table)) {
            Ok(config) => return Ok(config),
            Err(error) => error,
        };
        let at = error.path().to_string();
        // Only a value read as another type than a string, refused at its
        // own key, is tried as the string it was written as.
        if let Some(p) = pending
            .iter_mut()
            .find(|p| p.typed.is_some() && p.path.join(".") == at)
        {
            p.typed = None;
            continue;
        }
        let inner = error.into_inner().to_string();
        // The override at or inside which the error is, or the one that
        // made the section the file lacks where the error is.
        let made_by = |p: &&Pending| {
            let key = p.path.join(".");
            let inside = at
                .strip_prefix(&key)
                .and_then(|rest| rest.strip_prefix('.').or_else(|| rest.strip_prefix('[')));
            match (inside, &p.typed) {
                // Inside a table it set: only at a key of that table (the
                // rest of the table is the file's, merged).
                (Some(rest), Some(toml::Value::Table(set))) => set.keys().any(|k| {
                    rest == k
                        || rest.starts_with(&format!("{k}."))
                        || rest.starts_with(&format!("{k}["))
                }),
                (Some(_), _) => true,
                (None, _) => {
                    at == key || (key.starts_with(&format!("{at}.")) && !in_file(&file, &at))
                }
            }
        };
        return Err(match pending.iter().find(made_by) {
            // serde quotes the value it refused: never a secret's.
            Some(p) => {
                // Refused at or inside the value it set (not a section it
                // made, where serde quotes field names): may quote it.
                let key = p.path.join(".");
                let in_value = at == key
                    || at.starts_with(&format!("{key}."))
                    || at.starts_with(&format!("{key}["));
                let sensitive = in_value
                    && (shown(&p.path, p.typed.as_ref(), &p.text) != p.text
                        || SECRET_WORDS.iter().any(|word| at.contains(word)));
                let inner = if sensitive { unquoted(&inner) } else { inner };
                format!("{} (setting {}): {inner}", p.variable, p.path.join("."))
            }
            None if at.is_empty() || at == "." => format!("{origin}: {inner}"),
            None => format!("{origin}: {at}: {inner}"),
        });
    }
}

/// `message` with what serde quoted in it (between backticks or double
/// quotes) left out: the refused value, which may be a secret.
fn unquoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quote = None;
    for c in message.chars() {
        match quote {
            Some(q) if c == q => {
                out.push_str("(not shown)");
                quote = None;
            }
            Some(_) => {}
            None if c == '`' || c == '"' => quote = Some(c),
            None => out.push(c),
        }
    }
    out
}

/// Whether the file has a setting at the dotted `path`.
fn in_file(file: &toml::Table, path: &str) -> bool {
    let mut parts = path.split('.');
    let Some(first) = parts.next() else {
        return false;
    };
    let mut here = file.get(first);
    for part in parts {
        here = here.and_then(|value| value.get(part));
    }
    here.is_some()
}

/// Sets `path` in `table` to `value`, making the tables on the way; a table
/// is merged into the one there, key by key.
fn set(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or("no key")?;
    let mut here = table;
    for (depth, part) in parents.iter().enumerate() {
        let entry = here
            .entry(part.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = match entry {
            toml::Value::Table(inner) => inner,
            _ => {
                return Err(format!(
                    "{} is a value, not a section with keys",
                    path[..=depth].join(".")
                ))
            }
        };
    }
    match (here.get_mut(last), value) {
        (Some(toml::Value::Table(there)), toml::Value::Table(value)) => {
            for (key, value) in value {
                set(there, &[key], value)?;
            }
        }
        (_, value) => {
            here.insert(last.clone(), value);
        }
    }
    Ok(())
}

/// `value` (`typed` when it read as TOML) as the setting at `path` may be
/// shown: not at all under a name that says secret, nor a table (its keys
/// may); an array's strings and a string with a URL's password masked.
fn shown(path: &[String], typed: Option<&toml::Value>, value: &str) -> String {
    let name = path.join(".");
    if SECRET_WORDS.iter().any(|word| name.contains(word)) {
        return "(secret, not shown)".into();
    }
    match typed {
        Some(toml::Value::Table(_)) => "(a table, not shown)".into(),
        Some(toml::Value::Array(items)) => {
            let items: Vec<String> = items
                .iter()
                .map(|item| match item {
                    toml::Value::String(s) => format!("{:?}", masked_url_password(s)),
                    toml::Value::Table(_) | toml::Value::Array(_) => "(not shown)".into(),
                    other => other.to_string(),
                })
                .collect();
            format!("[{}]", items.join(", "))
        }
        _ => masked_url_password(value),
    }
}

/// A URL with a password (`scheme://user:password@host`) with the password
/// masked; anything else as it is.
fn masked_url_password(value: &str) -> String {
    let Some((scheme, rest)) = value.split_once("://") else {
        return value.to_owned();
    };
    // The last `@` ends the user information, which may hold an `@`, a `/`
    // or a `?` of its own (an `@` in the path after it masks more, never
    // less).
    let Some((userinfo, _)) = rest.rsplit_once('@') else {
        return value.to_owned();
    };
    let host = &rest[userinfo.len() + 1..];
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:****@{host}"),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Config {
        kafka: Kafka,
        mysql: Option<Mysql>,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Kafka {
        brokers: String,
        #[serde(default)]
        max_in_flight: usize,
        #[serde(default)]
        properties: BTreeMap<String, String>,
        #[serde(default)]
        tables: Vec<String>,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Mysql {
        url: String,
        password_env: Option<String>,
    }

    const FILE: &str = "[kafka]\nbrokers = \"file:9092\"\nmax_in_flight = 10\n";

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load(pairs: &[(&str, &str)]) -> Result<Settings<Config>, String> {
        parse(FILE, "forwarder.toml", "APP", env(pairs))
    }

    #[test]
    fn variables_set_keys_by_path_and_type() {
        let s = load(&[
            ("APP__KAFKA__BROKERS", "10.0.0.1:9092"),
            ("APP__KAFKA__MAX_IN_FLIGHT", "500"),
            ("APP__KAFKA__PROPERTIES__LINGER.MS", "20"),
            ("APP__KAFKA__TABLES", r#"["shop.outbox", "billing.outbox"]"#),
            ("APP__MYSQL__URL", "mysql://forwarder:hunter2@db:3306"),
            ("OTHER__KAFKA__BROKERS", "ignored"),
        ])
        .unwrap();
        assert_eq!(s.config.kafka.brokers, "10.0.0.1:9092");
        assert_eq!(s.config.kafka.max_in_flight, 500);
        // A number where a string is wanted is taken as written.
        assert_eq!(s.config.kafka.properties["linger.ms"], "20");
        assert_eq!(s.config.kafka.tables, ["shop.outbox", "billing.outbox"]);
        assert_eq!(
            s.config.mysql.unwrap().url,
            "mysql://forwarder:hunter2@db:3306"
        );
        let shown: Vec<_> = s
            .overrides
            .iter()
            .map(|o| (o.key.as_str(), o.shown.as_str()))
            .collect();
        assert!(
            shown.contains(&("mysql.url", "mysql://forwarder:****@db:3306")),
            "{shown:?}"
        );
        assert!(
            shown.contains(&("kafka.properties.linger.ms", "20")),
            "{shown:?}"
        );
        assert_eq!(s.overrides.len(), 5);
    }

    #[test]
    fn without_variables_the_file_alone_decides() {
        let s = load(&[]).unwrap();
        assert_eq!(s.config.kafka.brokers, "file:9092");
        assert!(s.overrides.is_empty());
        let refused =
            parse::<Config>("[kafka]\nbrokerz = 1\n", "f.toml", "APP", env(&[])).unwrap_err();
        assert!(
            refused.starts_with("f.toml: ") && refused.contains("brokerz"),
            "{refused}"
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_variable() {
        let unknown = load(&[("APP__KAFKA__BROKERZ", "x:9092")]).unwrap_err();
        assert!(
            unknown.starts_with("APP__KAFKA__BROKERZ (setting kafka.brokerz): ")
                && unknown.contains("unknown field `brokerz`"),
            "{unknown}"
        );
        let section = load(&[("APP__KAFKKA__BROKERS", "x:9092")]).unwrap_err();
        assert!(section.starts_with("APP__KAFKKA__BROKERS"), "{section}");
        let typed = load(&[("APP__KAFKA__MAX_IN_FLIGHT", "many")]).unwrap_err();
        assert!(typed.starts_with("APP__KAFKA__MAX_IN_FLIGHT"), "{typed}");
        let empty = load(&[("APP__KAFKA____BROKERS", "x")]).unwrap_err();
        assert!(empty.contains("empty key"), "{empty}");
        let inside = load(&[("APP__KAFKA__BROKERS__HOST", "x")]).unwrap_err();
        assert!(inside.contains("kafka.brokers is a value"), "{inside}");
    }

    /// A section the file lacks may come wholly from the environment, and
    /// its secrets are not shown.
    #[test]
    fn a_missing_section_comes_from_the_environment_with_secrets_masked() {
        let s = load(&[
            ("APP__MYSQL__URL", "mysql://db:3306"),
            ("APP__MYSQL__PASSWORD_ENV", "DB_PASSWORD"),
        ])
        .unwrap();
        assert_eq!(
            s.config.mysql.unwrap().password_env.as_deref(),
            Some("DB_PASSWORD")
        );
        let password = s
            .overrides
            .iter()
            .find(|o| o.key == "mysql.password_env")
            .unwrap();
        assert_eq!(password.shown, "(secret, not shown)");
        let missing = load(&[("APP__MYSQL__PASSWORD_ENV", "DB_PASSWORD")]).unwrap_err();
        assert!(missing.contains("url"), "{missing}");
    }

    /// Neither an error nor `check` shows a secret held in a table, an
    /// array or a URL, and an error at a section is not blamed on a valid
    /// variable inside it.
    #[test]
    fn secrets_stay_out_of_errors_and_errors_name_the_right_variable() {
        let table = load(&[(
            "APP__KAFKA__PROPERTIES",
            r#"{ "sasl.password" = "hunter2", "linger.ms" = 20 }"#,
        )])
        .unwrap_err();
        assert!(
            table.starts_with("APP__KAFKA__PROPERTIES ") && !table.contains("hunter2"),
            "{table}"
        );
        let missing = parse::<Config>(
            "[kafka]\nmax_in_flight = 1\n",
            "f.toml",
            "APP",
            env(&[("APP__KAFKA__MAX_IN_FLIGHT", "500")]),
        )
        .unwrap_err();
        assert!(
            missing.starts_with("f.toml: kafka: ") && missing.contains("brokers"),
            "{missing}"
        );
        let s = load(&[
            (
                "APP__KAFKA__TABLES",
                r#"["mysql://u:p1@h1", "mysql://u:p@ss@h2/db"]"#,
            ),
            (
                "APP__KAFKA__PROPERTIES",
                r#"{ "sasl.password" = "hunter2" }"#,
            ),
        ])
        .unwrap();
        let shown = format!("{:?}", s.overrides);
        assert!(
            !shown.contains("p1") && !shown.contains("ss@h2") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(shown.contains("mysql://u:****@h2/db"), "{shown}");
    }

    /// A table is merged into the file's; an empty value, two variables for
    /// one key, and a value that reads as more than one key are refused.
    #[test]
    fn tables_merge_and_ambiguous_values_are_refused() {
        let file =
            "[kafka]\nbrokers = \"b\"\n[kafka.properties]\n\"security.protocol\" = \"ssl\"\n";
        let s = parse::<Config>(
            file,
            "f",
            "APP",
            env(&[("APP__KAFKA__PROPERTIES", r#"{ "linger.ms" = "20" }"#)]),
        )
        .unwrap();
        assert_eq!(s.config.kafka.properties["security.protocol"], "ssl");
        assert_eq!(s.config.kafka.properties["linger.ms"], "20");
        let empty = load(&[("APP__KAFKA__BROKERS", "")]).unwrap_err();
        assert!(
            empty.contains("APP__KAFKA__BROKERS is set but empty"),
            "{empty}"
        );
        let twice = load(&[
            ("APP__KAFKA__BROKERS", "a:9092"),
            ("APP__kafka__brokers", "b:9092"),
        ])
        .unwrap_err();
        assert!(twice.contains("both set kafka.brokers"), "{twice}");
        let lines = load(&[("APP__KAFKA__MAX_IN_FLIGHT", "1\nbrokers = \"x\"")]).unwrap_err();
        assert!(lines.starts_with("APP__KAFKA__MAX_IN_FLIGHT "), "{lines}");
    }

    /// A review's cases: a URL password with `/`, a secret inside a table
    /// refused by type, the file's own error beside a table override, and a
    /// table set beside a key inside it.
    #[test]
    fn masked_and_blamed_as_they_should_be() {
        let s = load(&[("APP__MYSQL__URL", "mysql://repl:ab/cd?e@db:3306")]).unwrap();
        assert_eq!(s.overrides[0].shown, "mysql://repl:****@db:3306");
        let typed = load(&[(
            "APP__KAFKA__PROPERTIES",
            r#"{ "sasl.password" = 12345678 }"#,
        )])
        .unwrap_err();
        assert!(
            typed.starts_with("APP__KAFKA__PROPERTIES ") && !typed.contains("12345678"),
            "{typed}"
        );
        let file = "[kafka]\nbrokers = \"b\"\n[kafka.properties]\n\"linger.ms\" = 5\n";
        let theirs = parse::<Config>(
            file,
            "f.toml",
            "APP",
            env(&[("APP__KAFKA__PROPERTIES", r#"{ "acks" = "all" }"#)]),
        )
        .unwrap_err();
        assert!(theirs.starts_with("f.toml: kafka.properties"), "{theirs}");
        let both = load(&[
            ("APP__KAFKA__PROPERTIES", r#"{ "linger.ms" = "5" }"#),
            ("APP__KAFKA__PROPERTIES__LINGER.MS", "20"),
        ])
        .unwrap_err();
        assert!(both.contains("both set kafka.properties"), "{both}");
    }
}
