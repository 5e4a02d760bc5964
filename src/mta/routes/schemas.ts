import { Type, type TSchema } from '@sinclair/typebox';

/** The error envelope of every MTA endpoint. */
export const ErrorResponse = Type.Object(
  {
    error: Type.Object({
      message: Type.String(),
      category: Type.String(),
      data: Type.Optional(Type.Object({ reason: Type.String() })),
    }),
  },
  { description: 'Error envelope' },
);

/** `{ data }` success wrapper. */
export const Data = <T extends TSchema>(t: T) => Type.Object({ data: t });

/** Responses every master-only route can give besides its success. */
export const masterErrors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse } as const;

export const Email = Type.String({ minLength: 3, maxLength: 254 });
export const OrgId = Type.String({ minLength: 1, maxLength: 128 });
export const DomainName = Type.String({ minLength: 1, maxLength: 253 });
export const IsoDate = Type.String({ description: 'ISO 8601 date or date-time (UTC)' });

