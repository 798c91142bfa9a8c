"""What a changed poll of the run page sends: the rows the page lacks, not the window.

A live run page shows the newest WINDOW steps; re-sending them all after each new step
cost 125 KB a poll on a 10,000-step run. The page says which rows it shows in the
X-Live-Rows header: "<first>-<last>-<count>-<frame>", the positions of its first and
last step rows, how many rows it has, and the frame of its render (`page_frame`). When
the frame is the same and the rows are contiguous, the rows shown are still right (a
bar is in seconds, the browser rescales it) and the answer is a set of htmx
out-of-band swaps (run.html#run-delta): the new rows after the last one, the rows that
left the window deleted, the effects of the new rows, the facts and the axis. Anything
else gets the whole live region, as before, which is always correct.

Every viewer of a run whose page shows the same rows at the same version gets the same
out-of-band answer: it depends on the run and those rows, and on who asks only through
what the frame already holds (may this person cancel or resume). So the answer is kept
for a second (`shared_answer`) and the next viewers' polls after a change cost the
version query, not a render (each of them was 38 ms of a 50-step run's changed poll,
and ten people watching one run asked for it ten times). Nothing clock-derived is
wrong by more than that second: the time budget the page counts on from.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from django.core.cache import caches
from django.http import HttpRequest

from .. import roles
from ..models import Effect, Run

HEADER = "X-Live-Rows"
SHOWN = re.compile(r"(\d{1,9})-(\d{1,9})-(\d{1,9})-([0-9a-f]{16})")


@dataclass
class Shown:
    first: int
    last: int
    count: int
    frame: str


@dataclass
class Delta:
    after: int  # the position of the row the new rows go after
    steps: list[Any]  # the new rows
    gone_steps: list[int]  # positions of the rows that left the window
    effects: list[Effect]  # the new rows' effects, appended to #effects-settled
    gone_effects: list[int]  # pks of the effects that left with their rows


def page_frame(version_frame: str, context: dict[str, Any]) -> str:
    """What the rows a page shows depend on, besides the steps themselves: the run's
    frame (live.RunVersion), the axis's origin, and which optional parts the page has
    (an out-of-band swap of a part the page lacks would find no target)."""
    pending = context["pending"]
    parts = (
        version_frame,
        context["axis"]["origin"].isoformat(),
        context["native"],
        context["can_cancel"],
        context["can_resume"],
        context["window"].older_before is not None,
        bool(pending["handback"]),
        bool(pending["retry"]),
        [effect.pk for effect in pending["escalations"]],
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def rows_header(window: Any, frame: str) -> str:
    """X-Live-Rows for a page that shows `window`; "" for none (the page gets it all)."""
    if not window.steps or window.before is not None:
        return ""
    return f"{window.first_position}-{window.last_position}-{len(window.steps)}-{frame}"


def shown(request: HttpRequest) -> Shown | None:
    found = SHOWN.fullmatch(request.headers.get(HEADER, ""))
    if not found:
        return None
    first, last, count, frame = found.groups()
    return Shown(int(first), int(last), int(count), frame)


def delta(request: HttpRequest, record: Run, context: dict[str, Any]) -> Delta | None:
    """The out-of-band parts that bring the page from the rows it shows to the window,
    or None when it needs the whole region: another frame, another window, or rows
    that are not contiguous (a branch of a fan-out may still fill the gap)."""
    page = shown(request) if request.htmx else None
    window, frame = context["window"], context["live_frame"]
    if page is None or record.is_terminal or frame != page.frame or not window.steps:
        return None
    if window.before is not None or page.count != page.last - page.first + 1:
        return None
    first, last = window.first_position, window.last_position
    kept = [step for step in window.steps if step.position <= page.last]
    if first < page.first or first > page.last or last < page.last:
        return None
    if len(kept) != page.last - first + 1:  # a row shown is gone, or a gap was filled
        return None
    effects = context["effects"]
    gone = range(page.first, first)
    return Delta(
        after=page.last,
        steps=window.steps[len(kept) :],
        gone_steps=list(gone),
        effects=[e for e in effects if page.last < e.position <= last],
        gone_effects=_gone_effects(record, gone, effects),
    )


def _gone_effects(record: Run, gone: range, effects: list[Effect]) -> list[int]:
    """The effects of the rows leaving the window, but those still in doubt: the page
    keeps showing every pending or escalated write (step_window)."""
    if not gone:
        return []
    kept = {effect.pk for effect in effects}
    rows = record.effects.filter(position__gte=gone.start, position__lt=gone.stop)
    return [pk for pk in rows.values_list("pk", flat=True) if pk not in kept]


def shared_key(request: HttpRequest, run_id: str, version: str) -> str:
    """The key of the out-of-band answer for this page (its rows and frame, at the run's
    `version`), or "" for a request that may need the whole region."""
    if not request.htmx or "before" in request.GET or shown(request) is None:
        return ""
    # The frame in the header already differs by what the person may do; the permission
    # is in the key too, so no header a client makes up reaches another role's answer.
    operator = request.user.has_perm(roles.OPERATE_RUNS)
    text = "\n".join((run_id, version, request.headers[HEADER], str(operator)))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def shared_answer(key: str) -> bytes | None:
    return caches["live"].get(key) if key else None


def share(request: HttpRequest, key: str, body: bytes) -> None:
    """Keep `body` for the next viewers, unless rendering it used this person's CSRF token
    (a form in the answer): that token is theirs alone."""
    if key and not request.META.get("CSRF_COOKIE_NEEDS_UPDATE"):
        caches["live"].set(key, body)
