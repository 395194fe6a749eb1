"""The inspector's Compact form: the fields of ``POST /compact`` for a manual run."""

from __future__ import annotations

from django import forms

from compaction.dashboard.selectors import STRATEGY_LABELS


class CompactForm(forms.Form):
    """A manual compaction: strategy, summary instructions, turns kept intact."""

    strategy = forms.ChoiceField(choices=list(STRATEGY_LABELS.items()), initial="chain")
    instructions = forms.CharField(
        required=False,
        max_length=20_000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    retain_last_turns = forms.IntegerField(required=False, min_value=0, max_value=10_000)
