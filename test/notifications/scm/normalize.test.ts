import { expect } from 'chai';
import {
  normalizeScmEvent,
  ScmPayloadError,
  type NormalizedScmEvent,
  type ScmNotification,
  type ScmProvider,
} from '../../../src/notifications/scm/index.js';
import { fixture, githubDefinitions, githubExample } from './fixtures/load.js';

function notification(result: NormalizedScmEvent): ScmNotification {
  expect(result.kind, JSON.stringify(result)).to.equal('notify');
  return (result as Extract<NormalizedScmEvent, { kind: 'notify' }>).notification;
}

function expectIgnored(result: NormalizedScmEvent): void {
  expect(result.kind, JSON.stringify(result)).to.equal('ignored');
  expect((result as { reason: string }).reason).to.be.a('string').and.not.equal('');
}

function payloadError(provider: ScmProvider, event: string, payload: unknown): ScmPayloadError {
  try {
    normalizeScmEvent(provider, event, payload);
  } catch (error) {
    expect(error).to.be.instanceOf(ScmPayloadError);
    return error as ScmPayloadError;
  }
  throw new Error('expected a ScmPayloadError');
}

describe('scm webhook normalisation', () => {
  describe('GitHub (real payloads from @octokit/webhooks-examples)', () => {
    it('answers ping', () => {
      expect(normalizeScmEvent('github', 'ping', githubExample('ping'))).to.deep.equal({ kind: 'ping' });
    });

    it('push to a branch: pusher, commit count, branch, compare link', () => {
      const push = githubExample('push', (e) => e.ref === 'refs/heads/master');
      const n = notification(normalizeScmEvent('github', 'push', push));
      expect(n).to.deep.equal({
        title: '[Codertocat/Hello-World] Codertocat created branch master with 1 commit',
        message: 'Initial commit',
        level: 'info',
        source: 'scm:github',
        link: push.compare,
        toast: true,
      });

      // The same payload as an ordinary (not branch-creating) push of three commits.
      push.created = false;
      push.commits = [push.head_commit, push.head_commit, push.head_commit];
      push.compare = 'https://github.com/Codertocat/Hello-World/compare/a1b2c3d...6113728';
      const pushed = notification(normalizeScmEvent('github', 'push', push));
      expect(pushed.title).to.equal('[Codertocat/Hello-World] Codertocat pushed 3 commits to master');
      expect(pushed.link).to.equal('https://github.com/Codertocat/Hello-World/compare/a1b2c3d...6113728');
    });

    it('push creating and deleting tags', () => {
      const created = notification(normalizeScmEvent('github', 'push', githubExample('push', (e) => e.ref.startsWith('refs/tags/') && e.created)));
      expect(created.title).to.equal('[Codertocat/Hello-World] Codertocat created tag simple-tag');
      const deleted = notification(normalizeScmEvent('github', 'push', githubExample('push', (e) => e.deleted)));
      expect(deleted.title).to.equal('[Codertocat/Hello-World] Codertocat deleted tag simple-tag');
      expect(deleted.link).to.equal('https://github.com/Codertocat/Hello-World');
    });

    it('pull request opened, reopened, closed and merged link to the PR page', () => {
      const opened = notification(normalizeScmEvent('github', 'pull_request', githubExample('pull_request', (e) => e.action === 'opened')));
      expect(opened).to.deep.equal({
        title: '[Codertocat/Hello-World] Pull request #2 opened',
        message: 'Update the README with new information. (changes → master) by Codertocat',
        level: 'info',
        source: 'scm:github',
        link: 'https://github.com/Codertocat/Hello-World/pull/2',
        toast: true,
      });
      const reopened = notification(normalizeScmEvent('github', 'pull_request', githubExample('pull_request', (e) => e.action === 'reopened')));
      expect(reopened.title).to.equal('[Codertocat/Hello-World] Pull request #2 reopened');

      const closedPayload = githubExample('pull_request', (e) => e.action === 'closed');
      const closed = notification(normalizeScmEvent('github', 'pull_request', closedPayload));
      expect(closed.title).to.equal('[Codertocat/Hello-World] Pull request #2 closed');
      expect(closed.level).to.equal('info');

      // GitHub reports a merge as action "closed" with pull_request.merged = true.
      closedPayload.pull_request.merged = true;
      const merged = notification(normalizeScmEvent('github', 'pull_request', closedPayload));
      expect(merged.title).to.equal('[Codertocat/Hello-World] Pull request #2 merged');
      expect(merged.level).to.equal('success');
    });

    it('ignores other pull request actions without validating the rest', () => {
      for (const action of ['labeled', 'synchronize', 'assigned', 'review_requested', 'converted_to_draft']) {
        expectIgnored(normalizeScmEvent('github', 'pull_request', githubExample('pull_request', (e) => e.action === action)));
      }
      expectIgnored(normalizeScmEvent('github', 'pull_request', { action: 'labeled' }));
    });

    it('workflow_run: passed -> success, failed -> error, cancelled -> warning, queued/running -> info without toast', () => {
      const completed = githubExample('workflow_run', (e) => e.workflow_run.conclusion === 'success');
      const passed = notification(normalizeScmEvent('github', 'workflow_run', completed));
      expect(passed).to.deep.equal({
        title: '[octo-org/octo-repo] Workflow test #163 passed on master',
        message: completed.workflow_run.display_title ?? 'ci(action): update actions/setup-node digest to 8c91899',
        level: 'success',
        source: 'scm:github',
        link: 'https://github.com/octo-org/octo-repo/actions/runs/289782451',
        toast: true,
      });

      const levels: Record<string, [string, boolean]> = {
        failure: ['error', true],
        timed_out: ['error', true],
        cancelled: ['warning', true],
        action_required: ['warning', true],
      };
      for (const [conclusion, [level, toast]] of Object.entries(levels)) {
        const payload = githubExample('workflow_run', (e) => e.workflow_run.conclusion === 'success');
        payload.workflow_run.conclusion = conclusion;
        const n = notification(normalizeScmEvent('github', 'workflow_run', payload));
        expect([n.level, n.toast], conclusion).to.deep.equal([level, toast]);
      }

      const queued = notification(normalizeScmEvent('github', 'workflow_run', githubExample('workflow_run', (e) => e.action === 'requested' && e.workflow_run.status === 'queued')));
      expect([queued.level, queued.toast]).to.deep.equal(['info', false]);
      const running = githubExample('workflow_run', (e) => e.action === 'requested');
      running.action = 'in_progress';
      running.workflow_run.status = 'in_progress';
      const n = notification(normalizeScmEvent('github', 'workflow_run', running));
      expect([n.level, n.toast, n.title]).to.deep.equal(['info', false, '[octo-org/octo-repo] Workflow test #163 is running on master']);
    });

    it('workflow_run skipped or neutral is ignored', () => {
      for (const conclusion of ['skipped', 'neutral', 'stale']) {
        const payload = githubExample('workflow_run', (e) => e.workflow_run.conclusion === 'success');
        payload.workflow_run.conclusion = conclusion;
        expectIgnored(normalizeScmEvent('github', 'workflow_run', payload));
      }
    });

    it('check_suite: completed success and requested (queued, not toasted)', () => {
      const done = notification(normalizeScmEvent('github', 'check_suite', githubExample('check_suite', (e) => e.action === 'completed')));
      expect(done.level).to.equal('success');
      expect(done.toast).to.equal(true);
      expect(done.title).to.equal('[Codertocat/Hello-World] Checks by octocoders-linter passed on changes');
      expect(done.link).to.match(/^https:\/\/github\.com\/Codertocat\/Hello-World\/commit\/[0-9a-f]{40}$/);

      const failed = githubExample('check_suite', (e) => e.action === 'completed');
      failed.check_suite.conclusion = 'failure';
      expect(notification(normalizeScmEvent('github', 'check_suite', failed)).level).to.equal('error');

      const requested = notification(normalizeScmEvent('github', 'check_suite', githubExample('check_suite', (e) => e.action === 'requested')));
      expect([requested.level, requested.toast]).to.deep.equal(['info', false]);
    });

    it('status: success, failure, error and pending', () => {
      const success = notification(normalizeScmEvent('github', 'status', githubExample('status')));
      expect(success.title).to.equal('[Codertocat/Hello-World] default passed on master');
      expect(success.level).to.equal('success');
      // target_url is null in the example: the commit web page (not the API url) is the link.
      expect(success.link).to.equal('https://github.com/Codertocat/Hello-World/commit/6113728f27ae82c7b1a177c8d03f9e96e0adf246');

      const expectations: Record<string, [string, boolean]> = {
        failure: ['error', true],
        error: ['error', true],
        pending: ['info', false],
      };
      for (const [state, [level, toast]] of Object.entries(expectations)) {
        const payload = githubExample('status');
        payload.state = state;
        payload.target_url = 'https://ci.example.com/build/42';
        const n = notification(normalizeScmEvent('github', 'status', payload));
        expect([n.level, n.toast, n.link], state).to.deep.equal([level, toast, 'https://ci.example.com/build/42']);
      }
    });

    it('release: published notifies once; created, edited, deleted and drafts are ignored', () => {
      const published = notification(normalizeScmEvent('github', 'release', githubExample('release', (e) => e.action === 'published')));
      expect(published).to.deep.equal({
        title: '[Codertocat/Hello-World] Release 0.0.1 published',
        message: '0.0.1 published by Codertocat',
        level: 'success',
        source: 'scm:github',
        link: 'https://github.com/Codertocat/Hello-World/releases/tag/0.0.1',
        toast: true,
      });
      for (const action of ['created', 'edited', 'deleted', 'released', 'prereleased']) {
        expectIgnored(normalizeScmEvent('github', 'release', githubExample('release', (e) => e.action === action)));
      }
      const draft = githubExample('release', (e) => e.action === 'published');
      draft.release.draft = true;
      expectIgnored(normalizeScmEvent('github', 'release', draft));
      const pre = githubExample('release', (e) => e.action === 'published');
      pre.release.prerelease = true;
      expect(notification(normalizeScmEvent('github', 'release', pre)).title).to.equal('[Codertocat/Hello-World] Pre-release 0.0.1 published');
    });

    it('issues opened, closed, reopened; other actions ignored', () => {
      const opened = notification(normalizeScmEvent('github', 'issues', githubExample('issues', (e) => e.action === 'opened')));
      expect(opened).to.deep.equal({
        title: '[Codertocat/Hello-World] Issue #1 opened',
        message: 'Spelling error in the README file by Codertocat',
        level: 'info',
        source: 'scm:github',
        link: 'https://github.com/Codertocat/Hello-World/issues/1',
        toast: true,
      });
      expect(notification(normalizeScmEvent('github', 'issues', githubExample('issues', (e) => e.action === 'reopened'))).title).to.equal(
        '[Codertocat/Hello-World] Issue #1 reopened',
      );
      const closed = githubExample('issues', (e) => e.action === 'opened');
      closed.action = 'closed';
      expect(notification(normalizeScmEvent('github', 'issues', closed)).title).to.equal('[Codertocat/Hello-World] Issue #1 closed');
      for (const action of ['edited', 'labeled', 'pinned', 'deleted']) {
        expectIgnored(normalizeScmEvent('github', 'issues', githubExample('issues', (e) => e.action === action)));
      }
    });

    it('ignores events it does not handle', () => {
      for (const event of ['star', 'fork', 'watch', 'workflow_job', 'check_run', 'issue_comment', 'constructor', '__proto__']) {
        expectIgnored(normalizeScmEvent('github', event, {}));
      }
    });

    it('never throws on any real example of any event', () => {
      for (const definition of githubDefinitions()) {
        for (const example of definition.examples) {
          const result = normalizeScmEvent('github', definition.name, example);
          expect(['ping', 'ignored', 'notify']).to.include(result.kind);
        }
      }
    });
  });

  describe('Gitea (fixtures in the documented payload format)', () => {
    it('push: pusher, commit count, branch, compare link, first line of the head commit', () => {
      expect(notification(normalizeScmEvent('gitea', 'push', fixture('gitea-push')))).to.deep.equal({
        title: '[gitea/webhooks] gitea pushed 2 commits to develop',
        message: 'Webhooks Yay!',
        level: 'info',
        source: 'scm:gitea',
        link: 'http://localhost:3000/gitea/webhooks/compare/28e1879d029cb852e4844d9c718537df08844e03...bffeb74224043ba2feb48d137756c8a9331c449a',
        toast: true,
      });
    });

    it('push: new and deleted branches are told by the all-zero sha', () => {
      const created = fixture('gitea-push');
      created.before = '0000000000000000000000000000000000000000';
      created.compare_url = '';
      const n = notification(normalizeScmEvent('gitea', 'push', created));
      expect(n.title).to.equal('[gitea/webhooks] gitea created branch develop with 2 commits');
      expect(n.link).to.equal('http://localhost:3000/gitea/webhooks/commit/bffeb74224043ba2feb48d137756c8a9331c449a');

      const deleted = fixture('gitea-push');
      deleted.after = '0000000000000000000000000000000000000000';
      deleted.commits = [];
      deleted.total_commits = 0;
      deleted.head_commit = null;
      expect(notification(normalizeScmEvent('gitea', 'push', deleted)).title).to.equal('[gitea/webhooks] gitea deleted branch develop');
    });

    it('pull request opened, merged (closed + merged), closed; synchronized ignored', () => {
      const opened = notification(normalizeScmEvent('gitea', 'pull_request', fixture('gitea-pull_request')));
      expect(opened).to.deep.equal({
        title: '[gitea/webhooks] Pull request #12 opened',
        message: 'Fix the webhook docs (fix-docs → master) by gitea',
        level: 'info',
        source: 'scm:gitea',
        link: 'http://localhost:3000/gitea/webhooks/pulls/12',
        toast: true,
      });
      const merged = fixture('gitea-pull_request');
      merged.action = 'closed';
      merged.pull_request.merged = true;
      const m = notification(normalizeScmEvent('gitea', 'pull_request', merged));
      expect([m.title, m.level]).to.deep.equal(['[gitea/webhooks] Pull request #12 merged', 'success']);
      const closed = fixture('gitea-pull_request');
      closed.action = 'closed';
      expect(notification(normalizeScmEvent('gitea', 'pull_request', closed)).title).to.equal('[gitea/webhooks] Pull request #12 closed');
      const sync = fixture('gitea-pull_request');
      sync.action = 'synchronized';
      expectIgnored(normalizeScmEvent('gitea', 'pull_request', sync));
    });

    it('status: success, failure, error, warning, pending', () => {
      const success = notification(normalizeScmEvent('gitea', 'status', fixture('gitea-status')));
      expect(success).to.deep.equal({
        title: '[gitea/webhooks] ci/woodpecker/push/test passed on bffeb74',
        message: 'Pipeline was successful',
        level: 'success',
        source: 'scm:gitea',
        link: 'https://ci.example.com/repos/7/pipeline/25',
        toast: true,
      });
      const expectations: Record<string, [string, boolean]> = {
        failure: ['error', true],
        error: ['error', true],
        warning: ['warning', true],
        pending: ['info', false],
      };
      for (const [state, [level, toast]] of Object.entries(expectations)) {
        const payload = fixture('gitea-status');
        payload.state = state;
        const n = notification(normalizeScmEvent('gitea', 'status', payload));
        expect([n.level, n.toast], state).to.deep.equal([level, toast]);
      }
      // Without a target_url the Gitea commit page (commit.url is a web page on Gitea) is the link.
      const noTarget = fixture('gitea-status');
      noTarget.target_url = '';
      expect(notification(normalizeScmEvent('gitea', 'status', noTarget)).link).to.equal(
        'http://localhost:3000/gitea/webhooks/commit/bffeb74224043ba2feb48d137756c8a9331c449a',
      );
    });

    it('issues and releases', () => {
      const issue = notification(normalizeScmEvent('gitea', 'issues', fixture('gitea-issues')));
      expect([issue.title, issue.message, issue.link]).to.deep.equal([
        '[gitea/webhooks] Issue #2 opened',
        'Webhook crashes on empty body by gitea',
        'http://localhost:3000/gitea/webhooks/issues/2',
      ]);
      const labelled = fixture('gitea-issues');
      labelled.action = 'label_updated';
      expectIgnored(normalizeScmEvent('gitea', 'issues', labelled));

      const release = notification(normalizeScmEvent('gitea', 'release', fixture('gitea-release')));
      expect([release.title, release.level, release.link]).to.deep.equal([
        '[gitea/webhooks] Release First stable release published',
        'success',
        'http://localhost:3000/gitea/webhooks/releases/tag/v1.0',
      ]);
      const updated = fixture('gitea-release');
      updated.action = 'updated';
      expectIgnored(normalizeScmEvent('gitea', 'release', updated));
    });

    it('ignores Gitea events it does not handle, and has no ping', () => {
      for (const event of ['create', 'delete', 'fork', 'wiki', 'issue_comment', 'pull_request_approved', 'ping']) {
        expectIgnored(normalizeScmEvent('gitea', event, {}));
      }
    });
  });

  describe('GitLab (fixtures in the documented payload format)', () => {
    it('Push Hook: user, total commit count, branch, compare link', () => {
      expect(notification(normalizeScmEvent('gitlab', 'Push Hook', fixture('gitlab-push')))).to.deep.equal({
        title: '[mike/diaspora] jsmith pushed 4 commits to master',
        message: 'fixed readme',
        level: 'info',
        source: 'scm:gitlab',
        link: 'http://example.com/mike/diaspora/-/compare/95790bf891e76fee5e1747ab589903a6a1f80f22...da1560886d4f094c3e6c9ef40349f7d38b5d27d7',
        toast: true,
      });
    });

    it('Push Hook: branch names with slashes stay readable in the link', () => {
      const created = fixture('gitlab-push');
      created.before = '0000000000000000000000000000000000000000';
      created.ref = 'refs/heads/feature/a b';
      const n = notification(normalizeScmEvent('gitlab', 'Push Hook', created));
      expect(n.title).to.equal('[mike/diaspora] jsmith created branch feature/a b with 4 commits');
      expect(n.link).to.equal('http://example.com/mike/diaspora/-/tree/feature/a%20b');
    });

    it('Tag Push Hook and a System Hook carrying a push', () => {
      const tag = notification(normalizeScmEvent('gitlab', 'Tag Push Hook', fixture('gitlab-tag_push')));
      expect([tag.title, tag.link]).to.deep.equal([
        '[mike/diaspora] John Smith created tag v1.0.0',
        'http://example.com/mike/diaspora/-/tags/v1.0.0',
      ]);
      expect(notification(normalizeScmEvent('gitlab', 'System Hook', fixture('gitlab-push'))).title).to.equal(
        '[mike/diaspora] jsmith pushed 4 commits to master',
      );
      expectIgnored(normalizeScmEvent('gitlab', 'System Hook', { object_kind: 'repository_update' }));
    });

    it('Merge Request Hook: open, merge, close, reopen; update and approvals ignored', () => {
      expect(notification(normalizeScmEvent('gitlab', 'Merge Request Hook', fixture('gitlab-merge_request')))).to.deep.equal({
        title: '[mike/diaspora] Merge request !1 opened',
        message: 'MS-Viewport (ms-viewport → master) by root',
        level: 'info',
        source: 'scm:gitlab',
        link: 'http://example.com/mike/diaspora/-/merge_requests/1',
        toast: true,
      });
      const verbs: Record<string, [string, string]> = {
        merge: ['merged', 'success'],
        close: ['closed', 'info'],
        reopen: ['reopened', 'info'],
      };
      for (const [action, [verb, level]] of Object.entries(verbs)) {
        const payload = fixture('gitlab-merge_request');
        payload.object_attributes.action = action;
        const n = notification(normalizeScmEvent('gitlab', 'Merge Request Hook', payload));
        expect([n.title, n.level]).to.deep.equal([`[mike/diaspora] Merge request !1 ${verb}`, level]);
      }
      for (const action of ['update', 'approved', 'unapproved', 'approval', 'unapproval', 'constructor']) {
        const payload = fixture('gitlab-merge_request');
        payload.object_attributes.action = action;
        expectIgnored(normalizeScmEvent('gitlab', 'Merge Request Hook', payload));
      }
    });

    it('Pipeline Hook: success, failed, canceled, running, pending; skipped ignored', () => {
      expect(notification(normalizeScmEvent('gitlab', 'Pipeline Hook', fixture('gitlab-pipeline')))).to.deep.equal({
        title: '[mike/diaspora] Pipeline #31 passed on master',
        message: 'Pipeline for branch: master',
        level: 'success',
        source: 'scm:gitlab',
        link: 'http://example.com/mike/diaspora/-/pipelines/31',
        toast: true,
      });
      const expectations: Record<string, [string, boolean]> = {
        failed: ['error', true],
        canceled: ['warning', true],
        running: ['info', false],
        pending: ['info', false],
        created: ['info', false],
      };
      for (const [status, [level, toast]] of Object.entries(expectations)) {
        const payload = fixture('gitlab-pipeline');
        payload.object_attributes.status = status;
        const n = notification(normalizeScmEvent('gitlab', 'Pipeline Hook', payload));
        expect([n.level, n.toast], status).to.deep.equal([level, toast]);
      }
      const skipped = fixture('gitlab-pipeline');
      skipped.object_attributes.status = 'skipped';
      expectIgnored(normalizeScmEvent('gitlab', 'Pipeline Hook', skipped));

      // Older GitLab sends no object_attributes.url: the link is built from the project page.
      const old = fixture('gitlab-pipeline');
      delete old.object_attributes.url;
      expect(notification(normalizeScmEvent('gitlab', 'Pipeline Hook', old)).link).to.equal('http://example.com/mike/diaspora/-/pipelines/31');
    });

    it('Job Hook: created is quiet, success/failed/canceled toast, allowed failures warn', () => {
      const created = notification(normalizeScmEvent('gitlab', 'Job Hook', fixture('gitlab-job')));
      expect(created).to.deep.equal({
        title: '[gitlab-org/gitlab-test] Job test (test) was created on gitlab-script-trigger',
        message: 'test',
        level: 'info',
        source: 'scm:gitlab',
        link: 'http://192.168.64.1:3005/gitlab-org/gitlab-test/-/jobs/1977',
        toast: false,
      });
      const expectations: Record<string, [string, boolean]> = {
        success: ['success', true],
        failed: ['error', true],
        canceled: ['warning', true],
        running: ['info', false],
      };
      for (const [status, [level, toast]] of Object.entries(expectations)) {
        const payload = fixture('gitlab-job');
        payload.build_status = status;
        const n = notification(normalizeScmEvent('gitlab', 'Job Hook', payload));
        expect([n.level, n.toast], status).to.deep.equal([level, toast]);
      }
      const allowed = fixture('gitlab-job');
      allowed.build_status = 'failed';
      allowed.build_allow_failure = true;
      expect(notification(normalizeScmEvent('gitlab', 'Job Hook', allowed)).level).to.equal('warning');

      // Job events of older GitLab versions have no `project`: repository.homepage is the base.
      const old = fixture('gitlab-job');
      delete old.project;
      expect(notification(normalizeScmEvent('gitlab', 'Job Hook', old)).link).to.equal('http://192.168.64.1:3005/gitlab-org/gitlab-test/-/jobs/1977');
    });

    it('Release Hook create; update and delete ignored', () => {
      expect(notification(normalizeScmEvent('gitlab', 'Release Hook', fixture('gitlab-release')))).to.deep.equal({
        title: '[gitlab-org/release-webhook-example] Release v1.1 published',
        message: 'Tag v1.1',
        level: 'success',
        source: 'scm:gitlab',
        link: 'https://example.com/gitlab-org/release-webhook-example/-/releases/v1.1',
        toast: true,
      });
      for (const action of ['update', 'delete']) {
        const payload = fixture('gitlab-release');
        payload.action = action;
        expectIgnored(normalizeScmEvent('gitlab', 'Release Hook', payload));
      }
    });

    it('Issue Hook open/close/reopen; confidential issues are never broadcast', () => {
      const n = notification(normalizeScmEvent('gitlab', 'Issue Hook', fixture('gitlab-issue')));
      expect([n.title, n.message, n.link]).to.deep.equal([
        '[mike/diaspora] Issue #23 opened',
        'New API: create/update/delete file by root',
        'http://example.com/mike/diaspora/-/issues/23',
      ]);
      const closed = fixture('gitlab-issue');
      closed.object_attributes.action = 'close';
      expect(notification(normalizeScmEvent('gitlab', 'Issue Hook', closed)).title).to.equal('[mike/diaspora] Issue #23 closed');
      const confidential = fixture('gitlab-issue');
      confidential.object_attributes.confidential = true;
      expectIgnored(normalizeScmEvent('gitlab', 'Issue Hook', confidential));
      expectIgnored(normalizeScmEvent('gitlab', 'Confidential Issue Hook', fixture('gitlab-issue')));
    });

    it('ignores GitLab events it does not handle', () => {
      for (const event of ['Note Hook', 'Wiki Page Hook', 'Deployment Hook', 'Emoji Hook', 'Member Hook', 'constructor']) {
        expectIgnored(normalizeScmEvent('gitlab', event, {}));
      }
    });
  });

  describe('payload validation', () => {
    it('names the missing field of a handled event', () => {
      const pr = githubExample('pull_request', (e) => e.action === 'opened');
      delete pr.pull_request.title;
      const error = payloadError('github', 'pull_request', pr);
      expect(error.field).to.equal('pull_request.title');
      expect(error.message).to.include('pull_request.title');

      const push = fixture('gitea-push');
      delete push.repository.full_name;
      expect(payloadError('gitea', 'push', push).field).to.equal('repository.full_name');

      const pipeline = fixture('gitlab-pipeline');
      delete pipeline.object_attributes.status;
      expect(payloadError('gitlab', 'Pipeline Hook', pipeline).field).to.equal('object_attributes.status');

      const job = fixture('gitlab-job');
      job.build_id = 'not-a-number';
      expect(payloadError('gitlab', 'Job Hook', job).field).to.equal('build_id');
    });

    it('names the body when the payload is not an object', () => {
      for (const body of [null, [], 'push', 42]) {
        expect(payloadError('github', 'push', body).field).to.equal('body');
      }
    });

    it('drops links that are not http(s) and keeps text plain', () => {
      const pr = githubExample('pull_request', (e) => e.action === 'opened');
      pr.pull_request.html_url = 'javascript:alert(document.cookie)';
      pr.pull_request.title = '<img src=x onerror=alert(1)> & "quotes"';
      const n = notification(normalizeScmEvent('github', 'pull_request', pr));
      expect(n.link).to.equal(null);
      // Plain text: nothing escaped here, the UI escapes on output.
      expect(n.message).to.equal('<img src=x onerror=alert(1)> & "quotes" (changes → master) by Codertocat');

      for (const link of ['data:text/html,<b>x</b>', 'file:///etc/passwd', 'ftp://example.com/x', '//evil.example/x', 'https://user:pw@example.com/x', ' javascript:alert(1)']) {
        const status = fixture('gitea-status');
        status.target_url = link;
        status.commit.url = link;
        status.repository.html_url = link;
        expect(notification(normalizeScmEvent('gitea', 'status', status)).link, link).to.equal(null);
      }
    });

    it('keeps titles on one line and bounded', () => {
      const issue = githubExample('issues', (e) => e.action === 'opened');
      issue.repository.full_name = `owner/${'r'.repeat(400)}`;
      issue.issue.title = 'line one\nline two\u202Eevil\u0000';
      const n = notification(normalizeScmEvent('github', 'issues', issue));
      expect(n.title.length).to.be.at.most(200);
      expect(n.title.endsWith('…')).to.equal(true);
      expect(n.message).to.equal('line one line two evil by Codertocat');
    });
  });
});
