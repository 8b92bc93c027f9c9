/** Effect and record in one mikro-orm transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

ormTransactionsSuite('mikro-orm', 'postgres', await databaseAvailable('postgres'));
ormTransactionsSuite('mikro-orm', 'mysql', await databaseAvailable('mysql'));
