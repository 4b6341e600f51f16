"""Checks a user runs on their own pipeline: does it resume exactly (`check_resume`), and does
its loss accumulate as one big batch would (`check_accumulation`)? They sit above the Trainer
(they train with it) and write nothing into a user's runs. See docs/checks.md.
"""

from __future__ import annotations

from trainer.checks.accumulation import AccumulationReport, check_accumulation
from trainer.checks.resume import ResumeReport, check_resume

__all__ = ["AccumulationReport", "ResumeReport", "check_accumulation", "check_resume"]
