/**
 * Response shapes of the dashboard's admin routes, as TypeBox schemas: they serialize the
 * answers and document them in the OpenAPI document (the dashboard's typed client reads it).
 */
import { Type } from '@sinclair/typebox';

// Spelled out: a mapped array of literals types as never (policy ROLES is the same list).
const Role = Type.Union([Type.Literal('admin'), Type.Literal('editor'), Type.Literal('viewer')]);
const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);

export const SessionBody = Type.Object({
  data: Type.Object({
    user: Type.Object({ id: Type.String(), email: Type.String(), role: Role }),
    csrfToken: Type.String({ description: 'Send as x-csrf-token on POST, PUT, PATCH and DELETE' }),
  }),
});

export const User = Type.Object({
  id: Type.String(),
  email: Type.String(),
  role: Role,
  disabled: Type.Boolean(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const Pagination = Type.Object({ limit: Type.Integer(), cursor: Nullable(Type.String()), isDone: Type.Boolean() });

export const AuditEntry = Type.Object({
  id: Type.String(),
  actor: Type.Object({ id: Nullable(Type.String()), name: Type.String(), role: Type.String() }),
  method: Type.String(),
  route: Type.String(),
  targetId: Nullable(Type.String()),
  status: Type.Integer(),
  ip: Nullable(Type.String()),
  createdAt: Type.String(),
});
