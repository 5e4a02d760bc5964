/** The OpenAPI 3.1 document: generated from the route schemas, complete, and clean under Redocly's recommended rules. */
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type Api } from './helpers.js';

const OURS: [string, string][] = [
  ['get', '/api/v1/contacts'],
  ['post', '/api/v1/contacts'],
  ['get', '/api/v1/contacts/{id}'],
  ['put', '/api/v1/contacts/{id}'],
  ['delete', '/api/v1/contacts/{id}'],
  ['post', '/api/v1/topics/{topicId}/contacts'],
  ['delete', '/api/v1/topics/{topicId}/contacts/{emailOrId}'],
  ['post', '/api/v1/events'],
  ['post', '/api/v1/transactional'],
  ['post', '/admin/api-keys'],
  ['get', '/admin/api-keys'],
  ['delete', '/admin/api-keys/{id}'],
  ['post', '/admin/topics'],
  ['get', '/admin/topics'],
];

describe('OpenAPI document', () => {
  let api: Api;
  let doc: any;
  beforeAll(async () => {
    api = await startApi();
    const r = await api.call('GET', '/api/v1/openapi.json');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toContain('application/json');
    doc = r.body;
  });
  afterAll(async () => api?.close());

  it('is OpenAPI 3.1 covering /api/v1 and /admin only, with the envelope on every error response', () => {
    expect(doc.openapi).toBe('3.1.0');
    for (const p of Object.keys(doc.paths)) expect(p).toMatch(/^\/(api\/v1|admin)\//);
    expect(doc.components.schemas.ErrorEnvelope.properties.error.required).toEqual(['message', 'category']);
    expect(doc.components.securitySchemes).toMatchObject({ apiKey: { type: 'http', scheme: 'bearer' }, adminToken: { type: 'http', scheme: 'bearer' } });
    for (const [method, path] of OURS) {
      const op = doc.paths[path]?.[method];
      expect(op, `${method} ${path}`).toBeDefined();
      const errorStatuses = Object.keys(op.responses).filter((s) => Number(s) >= 400);
      expect(errorStatuses.length).toBeGreaterThan(0);
      for (const s of errorStatuses) {
        expect(op.responses[s].content['application/json'].schema.$ref, `${method} ${path} ${s}`).toBe('#/components/schemas/ErrorEnvelope');
      }
      if (path.startsWith('/api/v1')) {
        expect(errorStatuses).toEqual(expect.arrayContaining(['400', '401', '403', '429']));
        expect(op.security).toEqual([{ apiKey: [] }]);
      } else {
        expect(errorStatuses).toContain('401');
        expect(op.security).toEqual([{ adminToken: [] }]);
      }
    }
    expect(doc.paths['/api/v1/contacts'].get.parameters.map((p: any) => p.name).sort()).toEqual(['cursor', 'limit', 'search']);
    const list = doc.paths['/api/v1/contacts'].get.responses['200'].content['application/json'].schema;
    expect(list.properties.pagination.$ref).toBe('#/components/schemas/Pagination');
    expect(doc.paths['/api/v1/transactional'].post.parameters.find((p: any) => p.in === 'header').name).toBe('idempotency-key');
  });

  it('passes the Redocly linter (recommended rules): no errors; no warnings on this area\'s operations', async () => {
    const config = await createConfig({ extends: ['recommended'] });
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: 'openapi.json', config });
    const summary = problems.map((p) => `${p.severity} ${p.ruleId} @ ${p.location[0]?.pointer}`);
    expect(summary.filter((s) => s.startsWith('error'))).toEqual([]);
    const pointer = (path: string) => `#/paths/${path.replace(/\//g, '~1')}/`;
    const mine = summary.filter((s) => OURS.some(([, path]) => s.includes(pointer(path))) || !s.includes('#/paths/'));
    expect(mine).toEqual([]);
  });
});
