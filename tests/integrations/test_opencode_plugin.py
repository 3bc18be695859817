"""The OpenCode plugin reads shell commands as the SDK does: `node --test` runs integrations/opencode/test/, which
checks the plugin's `commandHints` and `programOf` on the cases the SDK's own tests read (tests/sdk/shell_hints.json).
Node runs no TypeScript: the test transpiles the plugin with the `typescript` npm package, which .ci/run installs
under ~/.cache/tao-ci-npm beside the harnesses."""

import os
import re
import shutil
import subprocess

from tests.integrations.conftest import CI_NPM_BIN, REPO, missing_harness

NODE_MODULES = CI_NPM_BIN.parent


def test_the_plugin_reads_shell_commands_as_the_sdk_does():
    node = shutil.which("node")
    if node is None:
        missing_harness("`node` is not installed (Debian's nodejs; .ci/run installs it)")
    if not (NODE_MODULES / "typescript").is_dir():
        missing_harness(f"the `typescript` npm package is not under {NODE_MODULES} (.ci/run installs it)")
    assert node is not None
    run = subprocess.run(
        [node, "--test", str(REPO / "integrations" / "opencode" / "test")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    passed = re.search(r"^# pass (\d+)$", run.stdout, flags=re.MULTILINE)
    assert passed is not None and int(passed.group(1)) >= 2, run.stdout
