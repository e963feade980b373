"""MLPerf-style submission packages of run folders (docs/submitting.md).

layout.py names the package's folders and files; runs.py reads what a package needs of a run
folder; system_description.py is MLPerf's system description; tree.py writes a package
(`benchbase package make`); package_checks.py checks one as MLPerf's package checker does
(`benchbase package check`), rcp_sets.py holding its result sets to the RCPs; summary.py is
MLPerf's result summarizer (`benchbase summarize`). Like benchbase.rcp, it judges what runs left
behind without the code that produced them: it never imports the harness or the CLI.
"""

from __future__ import annotations

from benchbase.packaging.layout import OrgFolder, ResultSet, org_folders
from benchbase.packaging.package_checks import PackageCheck, check_package
from benchbase.packaging.summary import SUMMARY_COLUMNS, summarize_package, summary_csv, summary_json
from benchbase.packaging.system_description import REQUIRED_KEYS, SystemDescription
from benchbase.packaging.tree import PackageMade, make_package

__all__ = [
    "REQUIRED_KEYS",
    "SUMMARY_COLUMNS",
    "OrgFolder",
    "PackageCheck",
    "PackageMade",
    "ResultSet",
    "SystemDescription",
    "check_package",
    "make_package",
    "org_folders",
    "summarize_package",
    "summary_csv",
    "summary_json",
]
