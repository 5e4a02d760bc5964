import { Type } from '@sinclair/typebox';
import multipart from '@fastify/multipart';
import { AppError, badInput } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { MtaContext } from '../context.js';
import type { AttachmentScanner } from '../scan/index.js';
import { Data, masterErrors } from './schemas.js';

const FindingView = Type.Object({ check: Type.String(), message: Type.String(), signature: Type.Optional(Type.String()) });
// Room for the multipart framing around the file.
const FRAMING_BYTES = 64 * 1024;

/**
 * POST /scan/attachment (master): multipart field `file`; the checks of rule 2, then clamd,
 * failing open. GET /scan/health (no credential): the scanner's connection and signatures.
 */
export async function scanRoutes(app: HttpApp, m: MtaContext, scanner: AttachmentScanner): Promise<void> {
  const max = m.policy.scan.maxFileBytes;
  const tooLarge = () => badInput(`The file is larger than ${max} bytes`, 'file_too_large');
  await app.register(multipart, { limits: { fileSize: max, files: 1, fields: 4, parts: 5, fieldSize: 1024 } });

  app.get(
    '/scan/health',
    {
      schema: {
        tags: ['scan'],
        summary: 'Malware scanner connection and signature version',
        response: {
          200: Data(
            Type.Object({
              scanner: Type.Union([Type.Literal('ok'), Type.Literal('unavailable'), Type.Literal('not_configured')]),
              engine: Type.Union([Type.String(), Type.Null()]),
              signatures: Type.Union([Type.String(), Type.Null()]),
              signaturesDate: Type.Union([Type.String(), Type.Null()]),
              error: Type.Union([Type.String(), Type.Null()]),
            }),
          ),
        },
      },
    },
    async () => ({ data: await scanner.health() }),
  );

  app.post(
    '/scan/attachment',
    {
      // Size first: a declared body over the limit is refused before it is read.
      onRequest: [
        m.auth.masterOnly,
        async (req) => {
          const len = Number(req.headers['content-length'] ?? 0);
          if (len > max + FRAMING_BYTES) throw tooLarge();
        },
      ],
      schema: {
        tags: ['scan'],
        security: [{ bearer: [] }],
        summary: 'File-type validation and malware scan of one file (fail open)',
        consumes: ['multipart/form-data'],
        response: {
          200: Data(
            Type.Object({
              verdict: Type.Union([Type.Literal('clean'), Type.Literal('rejected')]),
              findings: Type.Array(FindingView),
              scanner: Type.Union([Type.Literal('ok'), Type.Literal('unavailable')]),
              warnings: Type.Array(Type.String()),
            }),
          ),
          ...masterErrors,
        },
      },
    },
    async (req) => {
      if (!req.isMultipart()) throw badInput('Send the file as multipart/form-data in the field "file"', 'multipart_required');
      let file: { filename: string; contentType: string; data: Buffer } | null = null;
      try {
        for await (const part of req.parts()) {
          if (part.type !== 'file') continue;
          if (part.fieldname !== 'file' || file) {
            part.file.resume();
            continue;
          }
          file = { filename: part.filename ?? '', contentType: part.mimetype ?? '', data: await part.toBuffer() };
        }
      } catch (err) {
        if (err instanceof AppError) throw err;
        const code = (err as { code?: string }).code ?? '';
        if (/FILE_TOO_LARGE|LIMIT/i.test(code)) throw tooLarge();
        throw badInput(`The multipart body could not be read: ${(err as Error).message}`, 'invalid_multipart');
      }
      if (!file) throw badInput('The multipart body has no file in the field "file"', 'file_missing');
      const r = await scanner.scanFile(file);
      return { data: r };
    },
  );
}
