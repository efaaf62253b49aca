/**
 * GitHub and Gitea: Gitea's webhook payloads follow GitHub's shape (push, pull_request, issues,
 * release, status), so one set of schemas serves both; where they differ the schema takes both
 * spellings (compare / compare_url, total_commits, commit.html_url / commit.url).
 */
import Joi from 'joi';
import {
  actionOf,
  ciOutcome,
  describeRef,
  extract,
  firstLine,
  firstLink,
  firstOf,
  ignored,
  isSha,
  isZeroSha,
  linkBelow,
  notify,
  optionalText,
  plural,
  shortSha,
  userName,
  userSchema,
  type PayloadUser,
} from './common.js';
import type { NormalizedScmEvent } from './types.js';

type ForgeProvider = 'github' | 'gitea';

interface Repository {
  full_name: string;
  html_url?: string | null;
}

const repositorySchema = Joi.object({
  full_name: Joi.string().required(),
  html_url: optionalText,
}).required();

const refSchema = Joi.object({ ref: optionalText }).allow(null);

// ---- push ----------------------------------------------------------------------------------

interface PushPayload {
  ref: string;
  before?: string | null;
  after?: string | null;
  created?: boolean;
  deleted?: boolean;
  forced?: boolean;
  compare?: string | null;
  compare_url?: string | null;
  commits?: unknown[] | null;
  total_commits?: number;
  head_commit?: { message?: string | null; url?: string | null } | null;
  pusher?: PayloadUser | null;
  sender?: PayloadUser | null;
  repository: Repository;
}

const pushSchema = Joi.object({
  ref: Joi.string().required(),
  before: optionalText,
  after: optionalText,
  created: Joi.boolean(),
  deleted: Joi.boolean(),
  forced: Joi.boolean(),
  compare: optionalText,
  compare_url: optionalText,
  commits: Joi.array().allow(null),
  total_commits: Joi.number().integer().min(0),
  head_commit: Joi.object({ message: optionalText, url: optionalText }).allow(null),
  pusher: userSchema,
  sender: userSchema,
  repository: repositorySchema,
}).required();

export function forgePush(provider: ForgeProvider, payload: unknown): NormalizedScmEvent {
  const push = extract<PushPayload>(pushSchema, payload);
  const repo = push.repository.full_name;
  const { kind, name } = describeRef(push.ref);
  const actor = userName(push.pusher, push.sender);
  // GitHub says created/deleted outright; Gitea only shows it through an all-zero before/after.
  const created = push.created ?? isZeroSha(push.before);
  const deleted = push.deleted ?? isZeroSha(push.after);
  const count = push.total_commits ?? push.commits?.length ?? 0;
  const headLine = firstLine(push.head_commit?.message);
  const repoPage = push.repository.html_url;

  if (deleted) {
    return notify(provider, {
      title: `[${repo}] ${actor} deleted ${kind} ${name}`,
      message: `The ${kind} ${name} was deleted.`,
      level: 'info',
      link: firstLink(repoPage),
    });
  }
  const link = firstLink(push.compare, push.compare_url, push.head_commit?.url, repoPage);
  if (created) {
    const commits = kind === 'branch' && count > 0 ? ` with ${plural(count, 'commit')}` : '';
    return notify(provider, {
      title: `[${repo}] ${actor} created ${kind} ${name}${commits}`,
      message: headLine ?? `New ${kind} ${name}`,
      level: 'info',
      link,
    });
  }
  const verb = push.forced ? 'force-pushed' : 'pushed';
  return notify(provider, {
    title: `[${repo}] ${actor} ${verb} ${plural(count, 'commit')} to ${name}`,
    message: headLine ?? `${plural(count, 'commit')} on ${kind} ${name}`,
    level: 'info',
    link,
  });
}

// ---- pull requests -------------------------------------------------------------------------

interface PullRequestPayload {
  number: number;
  pull_request: {
    title: string;
    html_url?: string | null;
    merged?: boolean | null;
    head?: { ref?: string | null } | null;
    base?: { ref?: string | null } | null;
  };
  repository: Repository;
  sender?: PayloadUser | null;
}

const pullRequestSchema = Joi.object({
  number: Joi.number().integer().required(),
  pull_request: Joi.object({
    title: Joi.string().required(),
    html_url: optionalText,
    merged: Joi.boolean().allow(null),
    head: refSchema,
    base: refSchema,
  }).required(),
  repository: repositorySchema,
  sender: userSchema,
}).required();

const PULL_REQUEST_ACTIONS = new Set(['opened', 'reopened', 'closed']);

export function forgePullRequest(provider: ForgeProvider, payload: unknown): NormalizedScmEvent {
  const action = actionOf(payload);
  if (!PULL_REQUEST_ACTIONS.has(action)) return ignored(`pull request action "${action}" is not notified`);
  const event = extract<PullRequestPayload>(pullRequestSchema, payload);
  const pr = event.pull_request;
  const merged = action === 'closed' && pr.merged === true;
  const verb = merged ? 'merged' : action;
  const head = firstOf(pr.head?.ref);
  const base = firstOf(pr.base?.ref);
  const branches = head && base ? ` (${head} → ${base})` : '';
  return notify(provider, {
    title: `[${event.repository.full_name}] Pull request #${event.number} ${verb}`,
    message: `${pr.title}${branches} by ${userName(event.sender)}`,
    level: merged ? 'success' : 'info',
    link: firstLink(pr.html_url),
  });
}

// ---- issues --------------------------------------------------------------------------------

interface IssuePayload {
  issue: { number: number; title: string; html_url?: string | null };
  repository: Repository;
  sender?: PayloadUser | null;
}

const issueSchema = Joi.object({
  issue: Joi.object({
    number: Joi.number().integer().required(),
    title: Joi.string().required(),
    html_url: optionalText,
  }).required(),
  repository: repositorySchema,
  sender: userSchema,
}).required();

const ISSUE_ACTIONS = new Set(['opened', 'reopened', 'closed']);

export function forgeIssue(provider: ForgeProvider, payload: unknown): NormalizedScmEvent {
  const action = actionOf(payload);
  if (!ISSUE_ACTIONS.has(action)) return ignored(`issue action "${action}" is not notified`);
  const event = extract<IssuePayload>(issueSchema, payload);
  return notify(provider, {
    title: `[${event.repository.full_name}] Issue #${event.issue.number} ${action}`,
    message: `${event.issue.title} by ${userName(event.sender)}`,
    level: 'info',
    link: firstLink(event.issue.html_url),
  });
}

// ---- releases ------------------------------------------------------------------------------

interface ReleasePayload {
  release: { tag_name: string; name?: string | null; html_url?: string | null; prerelease?: boolean; draft?: boolean };
  repository: Repository;
  sender?: PayloadUser | null;
}

const releaseSchema = Joi.object({
  release: Joi.object({
    tag_name: Joi.string().required(),
    name: optionalText,
    html_url: optionalText,
    prerelease: Joi.boolean(),
    draft: Joi.boolean(),
  }).required(),
  repository: repositorySchema,
  sender: userSchema,
}).required();

/**
 * Only `published`: publishing a release on GitHub also sends `created` and `released`, and a
 * `created` alone is a saved draft, so one notification per release comes from `published`.
 */
export function forgeRelease(provider: ForgeProvider, payload: unknown): NormalizedScmEvent {
  const action = actionOf(payload);
  if (action !== 'published') return ignored(`release action "${action}" is not notified`);
  const event = extract<ReleasePayload>(releaseSchema, payload);
  const release = event.release;
  if (release.draft === true) return ignored('draft releases are not notified');
  const label = release.prerelease === true ? 'Pre-release' : 'Release';
  const name = firstOf(release.name, release.tag_name) ?? release.tag_name;
  return notify(provider, {
    title: `[${event.repository.full_name}] ${label} ${name} published`,
    message: `${release.tag_name} published by ${userName(event.sender)}`,
    level: release.prerelease === true ? 'info' : 'success',
    link: firstLink(release.html_url),
  });
}

// ---- commit status (GitHub `status`, Gitea `status`) ---------------------------------------

interface StatusPayload {
  state: string;
  context?: string | null;
  description?: string | null;
  target_url?: string | null;
  sha?: string | null;
  commit?: { html_url?: string | null; url?: string | null } | null;
  branches?: Array<{ name?: string | null }> | null;
  repository: Repository;
}

const statusSchema = Joi.object({
  state: Joi.string().required(),
  context: optionalText,
  description: optionalText,
  target_url: optionalText,
  sha: optionalText,
  commit: Joi.object({ html_url: optionalText, url: optionalText }).allow(null),
  branches: Joi.array()
    .items(Joi.object({ name: optionalText }))
    .allow(null),
  repository: repositorySchema,
}).required();

export function forgeStatus(provider: ForgeProvider, payload: unknown): NormalizedScmEvent {
  const status = extract<StatusPayload>(statusSchema, payload);
  const outcome = ciOutcome(status.state);
  if (!outcome) return ignored(`commit status "${status.state}" is not notified`);
  const where = firstOf(status.branches?.[0]?.name, shortSha(status.sha));
  const context = firstOf(status.context) ?? 'Commit status';
  // GitHub's commit.url is the API; its web page is html_url. Gitea's commit.url is the web page.
  const commitPage = provider === 'github' ? status.commit?.html_url : status.commit?.url;
  const repoCommitPage = isSha(status.sha) ? linkBelow(status.repository.html_url, 'commit', status.sha) : null;
  return notify(provider, {
    title: `[${status.repository.full_name}] ${context} ${outcome.phrase}${where ? ` on ${where}` : ''}`,
    message: firstOf(status.description) ?? `State ${status.state}${shortSha(status.sha) ? ` for ${shortSha(status.sha)}` : ''}`,
    level: outcome.level,
    toast: outcome.toast,
    link: firstLink(status.target_url, commitPage, repoCommitPage, status.repository.html_url),
  });
}

// ---- GitHub Actions and checks -------------------------------------------------------------

interface WorkflowRunPayload {
  workflow_run: {
    name?: string | null;
    status: string;
    conclusion?: string | null;
    html_url?: string | null;
    head_branch?: string | null;
    run_number?: number | null;
    display_title?: string | null;
    head_commit?: { message?: string | null } | null;
  };
  workflow?: { name?: string | null } | null;
  repository: Repository;
}

const workflowRunSchema = Joi.object({
  workflow_run: Joi.object({
    name: optionalText,
    status: Joi.string().required(),
    conclusion: optionalText,
    html_url: optionalText,
    head_branch: optionalText,
    run_number: Joi.number().integer().allow(null),
    display_title: optionalText,
    head_commit: Joi.object({ message: optionalText }).allow(null),
  }).required(),
  workflow: Joi.object({ name: optionalText }).allow(null),
  repository: repositorySchema,
}).required();

export function githubWorkflowRun(payload: unknown): NormalizedScmEvent {
  const event = extract<WorkflowRunPayload>(workflowRunSchema, payload);
  const run = event.workflow_run;
  const state = run.status === 'completed' ? run.conclusion : run.status;
  if (!state) return ignored('workflow run completed without a conclusion');
  const outcome = ciOutcome(state);
  if (!outcome) return ignored(`workflow run state "${state}" is not notified`);
  const name = firstOf(run.name, event.workflow?.name) ?? 'workflow';
  const number = typeof run.run_number === 'number' ? ` #${run.run_number}` : '';
  const branch = firstOf(run.head_branch);
  return notify('github', {
    title: `[${event.repository.full_name}] Workflow ${name}${number} ${outcome.phrase}${branch ? ` on ${branch}` : ''}`,
    message: firstOf(run.display_title, firstLine(run.head_commit?.message)) ?? `Workflow ${name}`,
    level: outcome.level,
    toast: outcome.toast,
    link: firstLink(run.html_url, event.repository.html_url),
  });
}

interface CheckSuitePayload {
  check_suite: {
    status: string;
    conclusion?: string | null;
    head_branch?: string | null;
    head_sha?: string | null;
    app?: { name?: string | null } | null;
    head_commit?: { message?: string | null } | null;
  };
  repository: Repository;
}

const checkSuiteSchema = Joi.object({
  check_suite: Joi.object({
    status: Joi.string().required(),
    conclusion: optionalText,
    head_branch: optionalText,
    head_sha: optionalText,
    app: Joi.object({ name: optionalText }).allow(null),
    head_commit: Joi.object({ message: optionalText }).allow(null),
  }).required(),
  repository: repositorySchema,
}).required();

export function githubCheckSuite(payload: unknown): NormalizedScmEvent {
  const event = extract<CheckSuitePayload>(checkSuiteSchema, payload);
  const suite = event.check_suite;
  const state = suite.status === 'completed' ? suite.conclusion : suite.status;
  if (!state) return ignored('check suite completed without a conclusion');
  const outcome = ciOutcome(state);
  if (!outcome) return ignored(`check suite state "${state}" is not notified`);
  const app = firstOf(suite.app?.name);
  const where = firstOf(suite.head_branch, shortSha(suite.head_sha));
  // The payload has no web URL for a suite; the commit page shows its checks.
  const commitPage = isSha(suite.head_sha) ? linkBelow(event.repository.html_url, 'commit', suite.head_sha) : null;
  return notify('github', {
    title: `[${event.repository.full_name}] Checks${app ? ` by ${app}` : ''} ${outcome.phrase}${where ? ` on ${where}` : ''}`,
    message: firstLine(suite.head_commit?.message) ?? `Check suite ${state}`,
    level: outcome.level,
    toast: outcome.toast,
    link: firstLink(commitPage, event.repository.html_url),
  });
}
