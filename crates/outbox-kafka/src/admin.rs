//! Admin clients, signed in: the forwarder creates topics with one.

use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::ClientConfig;

use crate::oauth::ClientAuth;

/// An admin client with the configured sign-in. With a token command,
/// its first token is made before it is used: librdkafka asks for a token
/// on the client's main queue, which rdkafka's admin client never serves,
/// so it would never sign in.
pub fn admin(
    connection: ClientConfig,
    auth: &ClientAuth,
) -> Result<AdminClient<ClientAuth>, String> {
    let auth = auth.for_client();
    let admin: AdminClient<ClientAuth> = connection
        .create_with_context(auth.clone())
        .map_err(|e| crate::connection::shown(&e))?;
    if auth.has_token_command() {
        crate::blocking::off_the_runtime(|| serve_token_refresh(&admin, &auth))?;
    }
    Ok(admin)
}

/// Waits (5 s at the most) on the admin client's main queue for
/// librdkafka's token refresh and answers it with a token from `auth`. Blocking.
fn serve_token_refresh(admin: &AdminClient<ClientAuth>, auth: &ClientAuth) -> Result<(), String> {
    use rdkafka::bindings as rd;
    let client = admin.inner().native_ptr();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // SAFETY: `client` is the live client `admin` owns for the whole call;
    // the queue reference and each event polled from it are destroyed
    // here, once each.
    unsafe {
        let queue = rd::rd_kafka_queue_get_main(client);
        let mut served = Err("librdkafka asked for no token within 5 s".to_owned());
        while std::time::Instant::now() < deadline {
            let event = rd::rd_kafka_queue_poll(queue, 100);
            if event.is_null() {
                continue;
            }
            let refresh =
                rd::rd_kafka_event_type(event) == rd::RD_KAFKA_EVENT_OAUTHBEARER_TOKEN_REFRESH;
            rd::rd_kafka_event_destroy(event);
            if refresh {
                served = set_token(client, auth);
                break;
            }
        }
        rd::rd_kafka_queue_destroy(queue);
        served
    }
}

/// Hands librdkafka a token from `auth`'s source, or the source's failure.
///
/// # Safety
/// `client` must be a live librdkafka client.
pub(crate) unsafe fn set_token(
    client: *mut rdkafka::bindings::rd_kafka_t,
    auth: &ClientAuth,
) -> Result<(), String> {
    use rdkafka::bindings as rd;
    use std::ffi::{CStr, CString};
    let token = match auth.generate() {
        Ok(token) => token,
        Err(why) => {
            let text = CString::new(why.to_string().replace('\0', " ")).unwrap_or_default();
            rd::rd_kafka_oauthbearer_set_token_failure(client, text.as_ptr());
            return Err(why.to_string());
        }
    };
    let (value, principal) = match (
        CString::new(token.token),
        CString::new(token.principal_name),
    ) {
        (Ok(value), Ok(principal)) => (value, principal),
        _ => return Err("the token holds a NUL byte".to_owned()),
    };
    let mut error = [0 as std::os::raw::c_char; 512];
    let code = rd::rd_kafka_oauthbearer_set_token(
        client,
        value.as_ptr(),
        token.lifetime_ms,
        principal.as_ptr(),
        std::ptr::null_mut(),
        0,
        error.as_mut_ptr(),
        error.len(),
    );
    if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(CStr::from_ptr(error.as_ptr())
            .to_string_lossy()
            .into_owned())
    }
}
