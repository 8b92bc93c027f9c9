/** Effect and record in one typeorm transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

ormTransactionsSuite('typeorm', 'postgres', await databaseAvailable('postgres'));
ormTransactionsSuite('typeorm', 'mysql', await databaseAvailable('mysql'));
