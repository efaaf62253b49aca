import { ignored } from './common.js';
import { forgeIssue, forgePullRequest, forgePush, forgeRelease, forgeStatus, githubCheckSuite, githubWorkflowRun } from './forge.js';
import { normalizeGitlab } from './gitlab.js';
import type { NormalizedScmEvent, ScmProvider } from './types.js';

const GITHUB_HANDLERS = new Map<string, (payload: unknown) => NormalizedScmEvent>(
  Object.entries({
    push: (payload) => forgePush('github', payload),
    pull_request: (payload) => forgePullRequest('github', payload),
    issues: (payload) => forgeIssue('github', payload),
    release: (payload) => forgeRelease('github', payload),
    status: (payload) => forgeStatus('github', payload),
    workflow_run: githubWorkflowRun,
    check_suite: githubCheckSuite,
  }),
);

// Gitea's X-Gitea-Event is the coarse event: pull_request also covers assign/label/sync
// (told apart by `action`), issues likewise.
const GITEA_HANDLERS = new Map<string, (payload: unknown) => NormalizedScmEvent>(
  Object.entries({
    push: (payload) => forgePush('gitea', payload),
    pull_request: (payload) => forgePullRequest('gitea', payload),
    issues: (payload) => forgeIssue('gitea', payload),
    release: (payload) => forgeRelease('gitea', payload),
    status: (payload) => forgeStatus('gitea', payload),
  }),
);

/**
 * Turns a verified, parsed webhook payload into a ping, an ignored event, or one broadcast
 * notification. Throws ScmPayloadError when a handled event lacks a field it needs.
 */
export function normalizeScmEvent(provider: ScmProvider, event: string, payload: unknown): NormalizedScmEvent {
  switch (provider) {
    case 'github': {
      if (event === 'ping') return { kind: 'ping' };
      const handler = GITHUB_HANDLERS.get(event);
      return handler ? handler(payload) : ignored(`github event "${event}" is not notified`);
    }
    case 'gitea': {
      const handler = GITEA_HANDLERS.get(event);
      return handler ? handler(payload) : ignored(`gitea event "${event}" is not notified`);
    }
    case 'gitlab':
      return normalizeGitlab(event, payload);
    default:
      return ignored('unknown provider');
  }
}
