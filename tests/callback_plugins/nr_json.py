# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only stdout callback: the whole run as one JSON document, for assertions on module results.

ansible-core 2.19 redirects ``ansible.builtin.json`` to ansible.posix, which the test machines
do not have; this prints the same shape: ``{"plays": [{"play": {"name"}, "tasks": [{"task":
{"name"}, "hosts": {host: result}}]}], "stats": {host: {...}}}``. Not part of the collection.
"""

from __future__ import annotations

import json

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "nr_json"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name()}, "hosts": {}})

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _record(self, result, **extra):
        data = dict(result._result)
        data.update(extra)
        self.plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = data

    def v2_runner_on_ok(self, result, **kwargs):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False, **kwargs):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result, **kwargs):
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result, **kwargs):
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        summary = {h: stats.summarize(h) for h in hosts}
        self._display.display(json.dumps({"plays": self.plays, "stats": summary}, default=str))
