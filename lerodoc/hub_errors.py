"""Errors of talking to the hub, in lerodoc's words: the low layer that both `hub` (downloads, pushes) and `access`
(reads of a hub dataset in place) use, so that neither imports the other's dependencies."""

from __future__ import annotations

from contextlib import contextmanager

from lerodoc.errors import ExitCode, LerodocError


class HubError(LerodocError):
    """The hub could not be reached, refused, or is switched off; files already fetched are kept."""

    exit_code = ExitCode.NETWORK


def offline() -> bool:
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import constants
    return bool(constants.HF_HUB_OFFLINE)


PROBE_TIMEOUT = 4.0   # seconds the one reachability probe may take (a closed port answers at once)


def reach_hub(repo: str, operation: str) -> None:
    """One request to the hub's endpoint (HF_ENDPOINT) before `operation` ("download", "push") starts, so that a hub
    that cannot be reached fails in seconds, once, naming the operation; huggingface_hub would retry its first
    request five times with backoff (about 24 s of "Retrying in 8s" lines) before giving up. Any HTTP answer counts
    as reached (the operation's own requests then meet the hub's real answers, retries of 5xx included); with
    HF_HUB_OFFLINE=1 nothing is sent. The request goes through huggingface_hub's own session (its proxies and
    headers), with PROBE_TIMEOUT or HF_HUB_ETAG_TIMEOUT, whichever is smaller."""
    if offline():
        return
    # httpx2 (huggingface_hub's client): loaded only for hub work
    import httpx2
    from huggingface_hub import constants, get_session
    timeout = min(PROBE_TIMEOUT, float(constants.HF_HUB_ETAG_TIMEOUT))
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout, follow_redirects=False)
    except httpx2.TransportError as exc:   # refused, unroutable, DNS, proxy, TLS, timed out: no answer at all
        why = f"no answer within {timeout:g} s" if isinstance(exc, httpx2.TimeoutException) or not str(exc) \
            else str(exc)
        raise HubError(f"{operation} failed: the hub at {constants.ENDPOINT} could not be reached "
                       f"({type(exc).__name__}: {why}); nothing was "
                       f"{'pushed' if operation == 'push' else 'fetched'}", file=repo,
                       hint="check the network, or set HF_ENDPOINT to a reachable mirror; run the same command "
                            "again once the hub answers") from None


@contextmanager
def hub_errors(repo: str, retry: str | None = None, *, taken_as: str = "", operation: str = "download"):
    """Turn huggingface_hub's and the network's exceptions into one-paragraph HubErrors about `repo`, naming the
    `operation` that failed ("download", "push"). `retry` is how the caller's command fetches from ModelScope
    instead, where it can (the hints offer it); `taken_as` opens each message when `repo` was only one reading of
    what the user typed (a path or a hub id)."""
    # httpx2 (huggingface_hub's client): loaded only for hub work
    import httpx2
    from huggingface_hub import errors

    or_retry = f", or use {retry}" if retry else ""
    pushing = operation == "push"
    kept = "the commit was not made" if pushing else "what arrived so far is kept"
    again = "run the same command again" + ("" if pushing else " to resume")

    def fail(message: str, hint: str) -> HubError:
        return HubError(taken_as + message, file=repo, hint=hint)

    try:
        yield
    except errors.HFValidationError as exc:
        raise LerodocError(f"{taken_as}is not a valid repository id ({exc})", file=repo,
                           hint="check the id: owner/name") from None
    except errors.GatedRepoError:
        raise fail("is gated: your account has not accepted its licence, or no token was sent",
                   f"accept it on the repository page and set HF_TOKEN (or `hf auth login`){or_retry}") from None
    except errors.RepositoryNotFoundError:
        raise fail("no such repository, or it is private",
                   "check the id (datasets and models are separate); set HF_TOKEN for a private one") from None
    except errors.RevisionNotFoundError:
        raise fail("no such revision", "check --revision") from None
    except errors.RemoteEntryNotFoundError:
        raise fail("the repository lacks a requested file", "pass --repo with a repository that holds it") from None
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled) as exc:
        if offline():
            raise fail("is not in the cache and downloads are off (HF_HUB_OFFLINE=1)",
                       "unset HF_HUB_OFFLINE where huggingface.co or an HF_ENDPOINT mirror"
                       + (f" or ModelScope ({retry})" if retry else "")
                       + " is reachable, or copy HF_HOME from a machine that has it") from None
        cause = exc.__cause__ or exc.__context__ or exc
        raise fail(f"{operation} failed: the hub failed or could not be reached ({type(cause).__name__}); {kept}",
                   f"{again}, set HF_ENDPOINT to a mirror{or_retry}") from None
    except errors.HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 429:
            raise fail("the hub is limiting this client's requests (429 Too Many Requests)",
                       "wait a few minutes and run the same command again; set HF_TOKEN (signed-in clients get a "
                       f"higher limit){or_retry}") from None
        raise fail(f"{operation} failed: the hub answered {exc.response.status_code}; {kept}", again) from None
    except (httpx2.HTTPError, OSError) as exc:
        raise fail(f"{operation} failed ({type(exc).__name__}: {exc}); {kept}",
                   f"{again}, set HF_ENDPOINT to a mirror{or_retry}") from None
