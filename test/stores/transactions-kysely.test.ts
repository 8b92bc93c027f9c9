/** Effect and record in one kysely transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

ormTransactionsSuite('kysely', 'postgres', await databaseAvailable('postgres'));
ormTransactionsSuite('kysely', 'mysql', await databaseAvailable('mysql'));
