#!/usr/bin/env bash
# Open a pull request with tonight's runs and the docs rendered from them (gh CLI).
# Usage: ci/open-pr.sh   (needs GH_TOKEN; does nothing when nothing changed)
set -euo pipefail
cd "$(dirname "$0")/.."
BRANCH="nightly/$(date -u +%Y%m%d)-${GITHUB_RUN_ID:-local}"
if git diff --quiet HEAD -- results docs README.md kernels && [ -z "$(git ls-files --others --exclude-standard results docs)" ]; then
  echo "[nightly] nothing new to propose"
  exit 0
fi
git config user.name "${GIT_AUTHOR_NAME:-tether-nightly}"
git config user.email "${GIT_AUTHOR_EMAIL:-tether-nightly@users.noreply.github.com}"
git checkout -b "$BRANCH"
git add results docs README.md kernels
git commit -m "nightly: runs from ${GITHUB_RUN_ID:-a local run} and the docs rendered from them"
git push origin "$BRANCH"
gh pr create --base "${GITHUB_BASE_REF:-main}" --head "$BRANCH" \
  --title "nightly hardware runs $(date -u +%Y-%m-%d)" \
  --body "Runs uploaded by each host job of ${GITHUB_SERVER_URL:-}/${GITHUB_REPOSITORY:-}/actions/runs/${GITHUB_RUN_ID:-}, merged with ci/collect.sh, docs re-rendered, tether check passed."
