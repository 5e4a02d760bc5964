/** The route→area map and the role table as data, and the session cookie's attributes. */
import { describe, expect, it } from 'vitest';
import { areaOf, mayWrite } from '../../../src/backend/api/admin-auth.js';
import { ADMIN_SESSION, ROLES } from '../../../src/backend/admin/policy.js';
import { SessionBody, User } from '../../../src/backend/admin/schemas.js';
import { sessionCookie } from '../../../src/backend/admin/sessions.js';

describe('admin areas and roles', () => {
  it('maps route patterns to areas, first prefix wins, unknown routes are settings', () => {
    expect(areaOf('/admin/contacts/imports')).toBe('imports');
    expect(areaOf('/admin/contacts/imports/:id')).toBe('imports');
    expect(areaOf('/admin/contacts/export.csv')).toBe('contacts');
    expect(areaOf('/admin/campaigns/:id/retry')).toBe('campaigns');
    expect(areaOf('/admin/share-links/:token')).toBe('templates');
    expect(areaOf('/admin/webhook-deliveries/:id/retry')).toBe('webhooks');
    expect(areaOf('/admin/topicsx')).toBe('settings'); // a prefix matches whole segments only
    expect(areaOf('/admin/provider-routes')).toBe('settings');
    expect(areaOf('/admin/sending/resume')).toBe('settings');
  });

  it('admin writes all, editor the marketing areas, viewer none but logout', () => {
    for (const area of ['contacts', 'topics', 'forms', 'templates', 'campaigns', 'imports']) {
      expect(mayWrite('editor', area)).toBe(true);
      expect(mayWrite('viewer', area)).toBe(false);
    }
    for (const area of ['users', 'api-keys', 'webhooks', 'settings', 'audit']) {
      expect(mayWrite('admin', area)).toBe(true);
      expect(mayWrite('editor', area)).toBe(false);
    }
    expect(mayWrite('viewer', 'session')).toBe(true);
  });

  it('session cookie: HttpOnly, SameSite=Strict, Path=/, Secure only on https, cleared with Max-Age=0', () => {
    expect(sessionCookie('tok', true)).toBe(`lm_session=tok; Max-Age=${ADMIN_SESSION.absoluteTimeoutMs / 1000}; HttpOnly; SameSite=Strict; Path=/; Secure`);
    expect(sessionCookie('tok', false)).not.toContain('Secure');
    expect(sessionCookie(null, true)).toBe('lm_session=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/; Secure');
  });

  it('the response schemas spell the same roles as the policy', () => {
    const consts = (u: { anyOf: { const: string }[] }) => u.anyOf.map((x) => x.const);
    expect(consts(SessionBody.properties.data.properties.user.properties.role as never)).toEqual([...ROLES]);
    expect(consts(User.properties.role as never)).toEqual([...ROLES]);
  });
});
