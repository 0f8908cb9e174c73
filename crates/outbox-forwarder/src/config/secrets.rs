//! Secrets kept outside the file: read from an environment variable or a
//! file, named in errors, never shown.

use std::ffi::OsString;
use std::path::Path;

use outbox_core::DefiniteError;

/// A secret read from the environment variable `name`, for `option`.
pub(super) fn secret_from_env(
    option: &str,
    name: &str,
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<String, DefiniteError> {
    let value = env(name).ok_or_else(|| {
        DefiniteError::Config(format!(
            "{option}: the environment variable {name} is not set"
        ))
    })?;
    let value = value.into_string().map_err(|_| {
        DefiniteError::Config(format!(
            "{option}: the environment variable {name} is not valid UTF-8"
        ))
    })?;
    if value.is_empty() {
        return Err(DefiniteError::Config(format!(
            "{option}: the environment variable {name} is empty"
        )));
    }
    Ok(value)
}

/// A secret read from the file at `path`, for `option`. One trailing
/// newline is dropped: `echo secret > file` should just work.
pub(super) fn secret_from_file(option: &str, path: &Path) -> Result<String, DefiniteError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        DefiniteError::Config(format!("{option}: cannot read {}: {e}", path.display()))
    })?;
    let value = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if value.is_empty() {
        return Err(DefiniteError::Config(format!(
            "{option}: {} is empty",
            path.display()
        )));
    }
    Ok(value.to_owned())
}
