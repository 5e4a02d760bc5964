import type { FastifyReply, FastifyRequest } from 'fastify';
import { safeEqual } from '../shared/crypto.js';
import { forbidden, unauthenticated } from '../shared/errors.js';
import { CredentialStore } from './stores/credentials.js';

export type MtaPrincipal = { kind: 'master' } | { kind: 'org'; organizationId: string; credentialId: string };

declare module 'fastify' {
  interface FastifyRequest {
    mtaPrincipal: MtaPrincipal | null;
  }
}

const MISSING = 'Missing or invalid Authorization header. Use: Authorization: Bearer <api_key>';

/**
 * Bearer authentication of the MTA API: the master key (MTA_API_KEY, compared in constant
 * time) or a per-organization key (`lm_org_…`, looked up by hash). No master key configured
 * means no master access (fail closed).
 */
export class MtaAuth {
  constructor(
    private readonly masterKey: string | undefined,
    private readonly credentials: CredentialStore,
  ) {}

  async principal(req: FastifyRequest): Promise<MtaPrincipal> {
    const header = req.headers.authorization;
    const m = typeof header === 'string' ? /^Bearer[ ]+(\S+)\s*$/i.exec(header) : null;
    if (!m) throw unauthenticated(MISSING, 'missing_credentials');
    const key = m[1]!;
    if (this.masterKey && safeEqual(key, this.masterKey)) return { kind: 'master' };
    if (CredentialStore.looksLikeOrgKey(key)) {
      const hit = await this.credentials.verify(key);
      if (hit) return { kind: 'org', organizationId: hit.organizationId, credentialId: hit.id };
    }
    throw unauthenticated('Invalid API key', 'invalid_api_key');
  }

  /** onRequest hook for /send: master or organization key. */
  readonly anyKey = async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    req.mtaPrincipal = await this.principal(req);
  };

  /** onRequest hook of every management route group: master key only. */
  readonly masterOnly = async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const p = await this.principal(req);
    if (p.kind !== 'master') throw forbidden('This endpoint requires the master key', 'master_key_required');
    req.mtaPrincipal = p;
  };
}
