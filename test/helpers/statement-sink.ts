/**
 * Where the mariadb connector (Prisma's MySQL adapter) reports each statement it sends, through
 * its documented `logger.query` option: test/helpers/prisma-case.ts passes it, and the ORM
 * suite's statement log listens while it counts.
 */
let listener: ((text: string) => void) | undefined;

/** Listen to the statements (`QUERY: ...`, `EXECUTE: ...`, `PREPARE: ...`); undefined stops. */
export function onMariadbStatement(listen: ((text: string) => void) | undefined): void {
  listener = listen;
}

/** The connector's `logger` option. */
export const mariadbLogger = { query: (message: string) => listener?.(message) };
