/** Effect and record in one knex transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

ormTransactionsSuite('knex', 'postgres', await databaseAvailable('postgres'));
ormTransactionsSuite('knex', 'mysql', await databaseAvailable('mysql'));
