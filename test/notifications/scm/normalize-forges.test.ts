import { expect } from 'chai';
import { normalizeScmEvent } from '../../../src/notifications/scm/index.js';
import { fixture } from './fixtures/load.js';
import { notification, expectIgnored } from './helpers.js';

describe('scm webhook normalisation', () => {
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
      expect([tag.title, tag.link]).to.deep.equal(['[mike/diaspora] John Smith created tag v1.0.0', 'http://example.com/mike/diaspora/-/tags/v1.0.0']);
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
});
