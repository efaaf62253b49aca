import { expect } from 'chai';
import { normalizeScmEvent } from '../../../src/notifications/scm/index.js';
import { fixture, githubDefinitions, githubExample } from './fixtures/load.js';
import { notification, expectIgnored, payloadError } from './helpers.js';

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
      const created = notification(
        normalizeScmEvent(
          'github',
          'push',
          githubExample('push', (e) => e.ref.startsWith('refs/tags/') && e.created),
        ),
      );
      expect(created.title).to.equal('[Codertocat/Hello-World] Codertocat created tag simple-tag');
      const deleted = notification(
        normalizeScmEvent(
          'github',
          'push',
          githubExample('push', (e) => e.deleted),
        ),
      );
      expect(deleted.title).to.equal('[Codertocat/Hello-World] Codertocat deleted tag simple-tag');
      expect(deleted.link).to.equal('https://github.com/Codertocat/Hello-World');
    });

    it('pull request opened, reopened, closed and merged link to the PR page', () => {
      const opened = notification(
        normalizeScmEvent(
          'github',
          'pull_request',
          githubExample('pull_request', (e) => e.action === 'opened'),
        ),
      );
      expect(opened).to.deep.equal({
        title: '[Codertocat/Hello-World] Pull request #2 opened',
        message: 'Update the README with new information. (changes → master) by Codertocat',
        level: 'info',
        source: 'scm:github',
        link: 'https://github.com/Codertocat/Hello-World/pull/2',
        toast: true,
      });
      const reopened = notification(
        normalizeScmEvent(
          'github',
          'pull_request',
          githubExample('pull_request', (e) => e.action === 'reopened'),
        ),
      );
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
        expectIgnored(
          normalizeScmEvent(
            'github',
            'pull_request',
            githubExample('pull_request', (e) => e.action === action),
          ),
        );
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

      const queued = notification(
        normalizeScmEvent(
          'github',
          'workflow_run',
          githubExample('workflow_run', (e) => e.action === 'requested' && e.workflow_run.status === 'queued'),
        ),
      );
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
      const done = notification(
        normalizeScmEvent(
          'github',
          'check_suite',
          githubExample('check_suite', (e) => e.action === 'completed'),
        ),
      );
      expect(done.level).to.equal('success');
      expect(done.toast).to.equal(true);
      expect(done.title).to.equal('[Codertocat/Hello-World] Checks by octocoders-linter passed on changes');
      expect(done.link).to.match(/^https:\/\/github\.com\/Codertocat\/Hello-World\/commit\/[0-9a-f]{40}$/);

      const failed = githubExample('check_suite', (e) => e.action === 'completed');
      failed.check_suite.conclusion = 'failure';
      expect(notification(normalizeScmEvent('github', 'check_suite', failed)).level).to.equal('error');

      const requested = notification(
        normalizeScmEvent(
          'github',
          'check_suite',
          githubExample('check_suite', (e) => e.action === 'requested'),
        ),
      );
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
      const published = notification(
        normalizeScmEvent(
          'github',
          'release',
          githubExample('release', (e) => e.action === 'published'),
        ),
      );
      expect(published).to.deep.equal({
        title: '[Codertocat/Hello-World] Release 0.0.1 published',
        message: '0.0.1 published by Codertocat',
        level: 'success',
        source: 'scm:github',
        link: 'https://github.com/Codertocat/Hello-World/releases/tag/0.0.1',
        toast: true,
      });
      for (const action of ['created', 'edited', 'deleted', 'released', 'prereleased']) {
        expectIgnored(
          normalizeScmEvent(
            'github',
            'release',
            githubExample('release', (e) => e.action === action),
          ),
        );
      }
      const draft = githubExample('release', (e) => e.action === 'published');
      draft.release.draft = true;
      expectIgnored(normalizeScmEvent('github', 'release', draft));
      const pre = githubExample('release', (e) => e.action === 'published');
      pre.release.prerelease = true;
      expect(notification(normalizeScmEvent('github', 'release', pre)).title).to.equal('[Codertocat/Hello-World] Pre-release 0.0.1 published');
    });

    it('issues opened, closed, reopened; other actions ignored', () => {
      const opened = notification(
        normalizeScmEvent(
          'github',
          'issues',
          githubExample('issues', (e) => e.action === 'opened'),
        ),
      );
      expect(opened).to.deep.equal({
        title: '[Codertocat/Hello-World] Issue #1 opened',
        message: 'Spelling error in the README file by Codertocat',
        level: 'info',
        source: 'scm:github',
        link: 'https://github.com/Codertocat/Hello-World/issues/1',
        toast: true,
      });
      expect(
        notification(
          normalizeScmEvent(
            'github',
            'issues',
            githubExample('issues', (e) => e.action === 'reopened'),
          ),
        ).title,
      ).to.equal('[Codertocat/Hello-World] Issue #1 reopened');
      const closed = githubExample('issues', (e) => e.action === 'opened');
      closed.action = 'closed';
      expect(notification(normalizeScmEvent('github', 'issues', closed)).title).to.equal('[Codertocat/Hello-World] Issue #1 closed');
      for (const action of ['edited', 'labeled', 'pinned', 'deleted']) {
        expectIgnored(
          normalizeScmEvent(
            'github',
            'issues',
            githubExample('issues', (e) => e.action === action),
          ),
        );
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

      for (const link of [
        'data:text/html,<b>x</b>',
        'file:///etc/passwd',
        'ftp://example.com/x',
        '//evil.example/x',
        'https://user:pw@example.com/x',
        ' javascript:alert(1)',
      ]) {
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
