/** UTC calendar helpers for day- and hour-scoped counters. */
export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;

export const utcDayStart = (t: number): number => Math.floor(t / DAY_MS) * DAY_MS;
export const utcHourStart = (t: number): number => Math.floor(t / HOUR_MS) * HOUR_MS;
/** `YYYYMMDD` of the UTC day. */
export const dayStamp = (t: number): string => new Date(t).toISOString().slice(0, 10).replace(/-/g, '');
/** `YYYYMMDDHH` of the UTC hour. */
export const hourStamp = (t: number): string => new Date(t).toISOString().slice(0, 13).replace(/[-T]/g, '');
