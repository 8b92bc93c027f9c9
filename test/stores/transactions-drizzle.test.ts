/** Effect and record in one drizzle transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

ormTransactionsSuite('drizzle', 'postgres', await databaseAvailable('postgres'));
ormTransactionsSuite('drizzle', 'mysql', await databaseAvailable('mysql'));
