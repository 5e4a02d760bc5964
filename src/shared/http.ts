import { validateHeaderName, validateHeaderValue } from 'node:http';
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Ajv, type Options as AjvOptions, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { AppError, badInput, CATEGORY_STATUS, envelope, type ErrorCategory } from './errors.js';
import { EDGE_POLICY } from './edge-policy.js';
import { clientErrorHandler, closeIfBodyPending, expectationFailed, frameworkErrors, limitConnections, refusedSockets, requestLineFault, RouteDeadlines } from './http-edge.js';
import type { Clock } from './clock.js';
import { SPEC, type Config } from './config.js';
import { findInputFault, findRequestFault, wasChecked, type InputFault } from './input.js';
import type { Logger } from './log.js';

export type HttpApp = FastifyInstance<any, any, any, any, TypeBoxTypeProvider>;

const STATUS_CATEGORY: Record<number, ErrorCategory> = Object.fromEntries(
  Object.entries(CATEGORY_STATUS).map(([c, s]) => [s, c as ErrorCategory]),
);

// ajv-formats is CommonJS with a default export; under NodeNext it arrives wrapped.
const addFormats = ((addFormatsModule as any).default ?? addFormatsModule) as (ajv: Ajv) => Ajv;

const BIGINT_MAX = 2n ** 63n - 1n;

function makeAjv(opts: AjvOptions): Ajv {
  const ajv = new Ajv({ removeAdditional: false, useDefaults: true, allErrors: false, strict: false, ...opts });
  addFormats(ajv);
  // A row id (a cursor) as decimal text, within PostgreSQL's bigint: past it the query fails.
  ajv.addFormat('bigint-id', { type: 'string', validate: (v: string) => /^(0|[1-9][0-9]{0,18})$/.test(v) && BigInt(v) <= BIGINT_MAX });
  return ajv;
}

/** Keys whose values are data, not schemas. */
const DATA_KEYWORDS = new Set(['default', 'const', 'enum', 'examples']);
/**
 * A copy of `schema` whose integers without bounds of their own are bounded to the safe
 * integers: past them JavaScript loses digits and PostgreSQL's bigint (LIMIT, OFFSET, ids)
 * overflows, a 500 instead of the 400 a value out of range is.
 */
function safeIntegers<T>(schema: T): T {
  const walk = (n: unknown): unknown => {
    if (Array.isArray(n)) return n.map(walk);
    if (!n || typeof n !== 'object') return n;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(n)) out[k] = DATA_KEYWORDS.has(k) ? v : walk(v);
    if (out.type === 'integer') {
      if (out.maximum === undefined && out.exclusiveMaximum === undefined) out.maximum = Number.MAX_SAFE_INTEGER;
      if (out.minimum === undefined && out.exclusiveMinimum === undefined) out.minimum = Number.MIN_SAFE_INTEGER;
    }
    return out;
  };
  return walk(schema) as T;
}

/** Bodies are typed JSON: a wrong type is an error, never coerced ("5" is not 5). */
const BODY_AJV = makeAjv({ coerceTypes: false });
/** Query strings, params and headers are text: coerce to the schema's types. */
const PARAM_AJV = makeAjv({ coerceTypes: 'array' });

/** The edge's timeouts and connection cap (config HTTP_*; docs/api.md → Input policy). */
export interface EdgeLimits {
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** 0: no limit. */
  maxConnectionsPerClient: number;
}

type EdgeConfig = Pick<Config, 'HTTP_HEADERS_TIMEOUT_MS' | 'HTTP_BODY_TIMEOUT_MS' | 'HTTP_REQUEST_TIMEOUT_MS' | 'HTTP_KEEPALIVE_TIMEOUT_MS' | 'HTTP_MAX_CONNECTIONS_PER_CLIENT'>;

/** The limits from configuration (defaults: the config table's). */
export function edgeLimits(config: Partial<EdgeConfig> = {}): EdgeLimits {
  const d = <K extends keyof EdgeConfig>(k: K): number => (config[k] ?? SPEC[k].default) as number;
  return {
    headersTimeoutMs: d('HTTP_HEADERS_TIMEOUT_MS'),
    bodyTimeoutMs: d('HTTP_BODY_TIMEOUT_MS'),
    requestTimeoutMs: d('HTTP_REQUEST_TIMEOUT_MS'),
    keepAliveTimeoutMs: d('HTTP_KEEPALIVE_TIMEOUT_MS'),
    maxConnectionsPerClient: d('HTTP_MAX_CONNECTIONS_PER_CLIENT'),
  };
}

const deadlinesOf = new WeakMap<object, RouteDeadlines>();
/** A route as registered: method, URL and its querystring schema. */
export interface RouteEntry {
  method: string;
  url: string;
  querystring?: TSchemaLike;
}
const routesOfApp = new WeakMap<object, RouteEntry[]>();
/** Every route of an app from createHttpApp (the hostile tests probe each list route's query). */
export const routesOf = (app: object): readonly RouteEntry[] => routesOfApp.get(app) ?? [];
/** The route deadlines of an app from createHttpApp (tests read how many requests are open). */
export const routeDeadlinesOf = (app: object): RouteDeadlines | undefined => deadlinesOf.get(app);

/**
 * A Fastify instance with the house rules: TypeBox schemas that reject unknown fields
 * (no silent stripping), the error envelope on every failure, no stack traces on the wire,
 * and the edge: the input policy, deadlines and the per-client connection cap.
 */
export function createHttpApp(opts: { log: Logger; bodyLimit?: number; trustProxy?: boolean | number | string | readonly string[]; limits?: EdgeLimits; clock?: Clock }): HttpApp {
  const limits = opts.limits ?? edgeLimits();
  // Node requires the header deadline within the request's; both are checked every interval.
  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.bodyTimeoutMs);
  const app = Fastify({
    http: {
      // Missing Host is answered in the envelope by the onRequest hook (requestLineFault).
      requireHostHeader: false,
      headersTimeout,
      requestTimeout: limits.bodyTimeoutMs,
      connectionsCheckingInterval: Math.max(10, Math.min(EDGE_POLICY.deadlineCheckMs, Math.ceil(headersTimeout / 4))),
    },
    requestTimeout: limits.bodyTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    loggerInstance: opts.log,
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: lazyRequestLogger as any,
    bodyLimit: opts.bodyLimit ?? 1024 * 1024,
    // A hop count is "trust the nearest N proxies" (the typings omit the number form).
    trustProxy: typeof opts.trustProxy === 'number' ? hopCount(opts.trustProxy) : typeof opts.trustProxy === 'object' ? [...opts.trustProxy] : (opts.trustProxy ?? false),
    return503OnClosing: true,
    routerOptions: { maxParamLength: EDGE_POLICY.maxParamLength },
    // Errors before routing and the parser's own refusals, in the envelope (./http-edge.ts);
    // cast because the typings offer only the overloads of every server kind at once.
    frameworkErrors: frameworkErrors as any,
    clientErrorHandler: clientErrorHandler as any,
  }).withTypeProvider<TypeBoxTypeProvider>();

  limitConnections(app.server, limits.maxConnectionsPerClient, opts.log);
  app.server.on('checkExpectation', expectationFailed);
  const deadlines = RouteDeadlines.install(app, limits.requestTimeoutMs, opts.clock);
  deadlinesOf.set(app, deadlines);
  const routes: RouteEntry[] = [];
  routesOfApp.set(app, routes);
  app.addHook('onRoute', (r) => {
    for (const method of [r.method].flat()) routes.push({ method, url: r.url, querystring: r.schema?.querystring as TSchemaLike | undefined });
  });

  app.setValidatorCompiler(({ schema, httpPart }) => {
    if (httpPart === 'body') return BODY_AJV.compile(safeIntegers(schema)) as any;
    return decimalOnly(schema as TSchemaLike, PARAM_AJV.compile(safeIntegers(schema))) as any;
  });
  app.setErrorHandler(errorHandler);
  // The input policy (./input.ts), before any route's own hooks: path, query and headers as
  // soon as the route is known, the parsed body before validation.
  app.addHook('onRequest', (req, reply, done) => {
    // A connection over the per-client limit was answered with its 429 (./http-edge.ts).
    if (refusedSockets.has(req.raw.socket)) {
      reply.hijack();
      return done();
    }
    deadlines.start(reply);
    const refused = requestLineFault(req);
    if (refused) return done(refused);
    const fault = findRequestFault(req);
    done(fault ? inputError(fault) : undefined);
  });
  app.addHook('preValidation', (req, _reply, done) => {
    const fault = req.body === undefined || wasChecked(req.body) ? null : findInputFault(req.body, 'body');
    done(fault ? inputError(fault) : undefined);
  });
  app.setNotFoundHandler((req, reply) => {
    reply.code(404).send(envelope('not_found', `Route not found: ${req.method} ${req.url.split('?')[0]}`));
  });
  return app;
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;

/**
 * Fastify's per-request logger (`req.log`), made the first time a request logs at an enabled
 * level. pino's child() runs the reqId binding through redaction: ~10 µs on every request, 0.8 %
 * of the MTA's event loop at 5 KB, for a logger that almost no request uses.
 */
class LazyRequestLogger {
  private made: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly bindings_: Record<string, unknown>,
    private readonly opts: object,
  ) {}
  get real(): Logger {
    return (this.made ??= this.parent.child(this.bindings_, this.opts));
  }
  get level(): string {
    return this.made?.level ?? this.parent.level;
  }
  isLevelEnabled(level: string): boolean {
    return (this.made ?? this.parent).isLevelEnabled(level);
  }
  bindings(): Record<string, unknown> {
    return this.made?.bindings() ?? { ...this.parent.bindings(), ...this.bindings_ };
  }
  child(bindings: Record<string, unknown>, opts?: object): Logger {
    return this.real.child(bindings, opts);
  }
  silent(): void {}
}
for (const level of LEVELS) {
  (LazyRequestLogger.prototype as any)[level] = function (this: LazyRequestLogger, ...args: unknown[]) {
    if (this.isLevelEnabled(level)) (this.real[level] as (...a: unknown[]) => void)(...args);
  };
}

function lazyRequestLogger(parent: Logger, bindings: Record<string, unknown>, opts: { level?: string }): Logger {
  // A route's own log level changes what is enabled: made at once, as Fastify would.
  if (opts.level !== undefined) return parent.child(bindings, opts);
  return new LazyRequestLogger(parent, bindings, opts) as unknown as Logger;
}

export type TSchemaLike = { type?: unknown; properties?: Record<string, TSchemaLike>; anyOf?: TSchemaLike[] };
const DECIMAL = { integer: /^-?\d+$/, number: /^-?\d+(\.\d+)?$/ } as const;

/** The numeric type a property of a query/params/headers schema accepts, if any. */
function numericType(s: TSchemaLike | undefined): 'integer' | 'number' | null {
  if (!s) return null;
  if (s.type === 'integer' || s.type === 'number') return s.type;
  for (const alt of s.anyOf ?? []) {
    const t = numericType(alt);
    if (t) return t;
  }
  return null;
}

/**
 * Ajv coerces text to numbers as JavaScript does (`0x10` is 16, `1e3` is 1000, ` 5 ` is 5):
 * numbers in a URL or header are plain decimals here, anything else fails validation.
 */
function decimalOnly(schema: TSchemaLike, validate: ValidateFunction): ValidateFunction {
  const numeric = Object.entries(schema.properties ?? {}).flatMap(([k, p]) => {
    const t = numericType(p);
    return t ? [[k, DECIMAL[t]] as const] : [];
  });
  if (numeric.length === 0) return validate;
  const wrapped = ((data: Record<string, unknown> | undefined) => {
    for (const [k, re] of numeric) {
      const v = data?.[k];
      for (const x of Array.isArray(v) ? v : [v]) {
        if (typeof x === 'string' && !re.test(x)) {
          wrapped.errors = [{ instancePath: `/${k}`, schemaPath: '', keyword: 'type', params: {}, message: 'must be a decimal number' }];
          return false;
        }
      }
    }
    const ok = validate(data);
    wrapped.errors = validate.errors;
    return ok;
  }) as ValidateFunction;
  return wrapped;
}

export function inputError(f: InputFault): AppError {
  // A forbidden key is what Fastify's own JSON parser refuses: the same answer as there.
  return f.reason === 'forbidden_key' ? badInput('Request body is not valid JSON', 'invalid_json') : badInput(f.message, f.reason);
}

function validationMessage(err: FastifyError): string {
  const v = err.validation?.[0];
  if (!v) return err.message;
  const where = `${err.validationContext ?? 'request'}${v.instancePath.replace(/\//g, '.')}`;
  if (v.keyword === 'additionalProperties') {
    return `Unknown field: ${where}.${(v.params as { additionalProperty: string }).additionalProperty}`;
  }
  if (v.keyword === 'required') {
    return `Missing required field: ${where}.${(v.params as { missingProperty: string }).missingProperty}`;
  }
  return `Invalid ${where}: ${v.message}`;
}

export function errorHandler(err: FastifyError | AppError, req: FastifyRequest, reply: FastifyReply): void {
  // A header Node refuses (CR/LF in a Location) fails the answer itself: without it, the
  // error below still goes out in the envelope instead of Fastify's fallback.
  const code = (err as { code?: string }).code;
  if (code === 'ERR_INVALID_CHAR' || code === 'ERR_HTTP_INVALID_HEADER_VALUE') dropInvalidHeaders(reply);
  closeIfBodyPending(req, reply);
  if (err instanceof AppError) {
    reply.code(err.status).headers(err.headers).send(err.toEnvelope());
    return;
  }
  const fe = err as FastifyError;
  if (fe.validation) {
    reply.code(400).send(envelope('invalid_input', validationMessage(fe), 'validation_error'));
    return;
  }
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      reply.code(400).send(envelope('invalid_input', 'Request body is too large', 'body_too_large'));
      return;
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      reply
        .code(400)
        .send(envelope('invalid_input', `Unsupported Content-Type: ${req.headers['content-type'] ?? 'none'}`, 'unsupported_media_type'));
      return;
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      reply.code(400).send(envelope('invalid_input', 'Request body is empty but Content-Type is application/json', 'invalid_json'));
      return;
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      reply.code(400).send(envelope('invalid_input', 'Request body is not valid JSON', 'invalid_json'));
      return;
  }
  const status = fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 600 ? fe.statusCode : 500;
  if (status >= 500) {
    req.log.error({ err }, 'request failed');
    reply.code(status).send(envelope(STATUS_CATEGORY[status] ?? 'internal', 'Internal server error'));
    return;
  }
  const message = fe instanceof SyntaxError ? 'Request body is not valid JSON' : fe.message;
  reply.code(status).send(envelope(STATUS_CATEGORY[status] ?? 'invalid_input', message));
}

function dropInvalidHeaders(reply: FastifyReply): void {
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    try {
      validateHeaderName(name);
      for (const v of Array.isArray(value) ? value : [value]) validateHeaderValue(name, String(v));
    } catch {
      reply.removeHeader(name);
    }
  }
}

function hopCount(hops: number) {
  return (_address: string, hop: number) => hop < hops;
}

/** Port a listening app was bound to (for PORT=0 in tests). */
export function boundPort(app: HttpApp): number {
  const addr = app.server.address();
  return typeof addr === 'object' && addr ? addr.port : 0;
}
